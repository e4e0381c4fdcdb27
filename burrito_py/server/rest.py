"""The server's REST API for people and the UI (docs/architecture.md §11.2): layers, their runs, a run's logs
and plan, and `POST /api/layers/{ns}/{name}/sync`.

Everything is read live from the Kubernetes API (layers, runs, repositories) and the datastore (logs,
plans); the server keeps no state. Every route needs a bearer token checked by the datastore's
authenticator (a TokenReview, throttled: `throttle.py`), and then what the caller reads or does is authorized
as the caller with a SubjectAccessReview in the object's namespace (`access.py`: `get`/`list` for reads, `patch
terraformlayers` for actions), before the object is read, so a 403 never tells whether it exists. Runner
identities get 403 on every route. Plans and logs are masked (`reads.Artifacts`); the raw plan JSON needs `get
secrets` in the layer's namespace.

Errors are `{"error": "..."}` naming the parameter or object; bad input is a 400 (the route class below turns
FastAPI's 422 into 400, so the API answers like the datastore and the webhook).
"""

# No `from __future__ import annotations`: FastAPI must resolve the handlers' annotations, and `Caller` is
# local to `rest_router` (it closes over the authenticator), which a string annotation could not name.
import asyncio
import json
import logging
from collections.abc import Callable, Coroutine, Sequence
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi import Path as PathParam
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse
from fastapi.routing import APIRoute
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from burrito_py.api import annotations as ann
from burrito_py.datastore.auth import (
    AUTH_DISABLED,
    MISSING_CREDENTIALS,
    AuthUnavailable,
    Principal,
    Unauthenticated,
    proxied_token,
)
from burrito_py.datastore.review_throttle import Throttled, ThrottledAuthenticator
from burrito_py.kube.client import Body, Kube, KubeError, crd_path
from burrito_py.kube.service_proxy import PROXIED_AUTHORIZATION
from burrito_py.policy.override import override_refusal
from burrito_py.server.access import (
    GET_LAYERS,
    GET_REPOSITORIES,
    GET_RUNS,
    GET_SECRETS,
    LIST_LAYERS,
    LIST_RUNS,
    PATCH_LAYERS,
    Access,
    AccessUnavailable,
    Forbidden,
)
from burrito_py.server.layer_actions import LayerNotFound, request_sync
from burrito_py.server.reads import (
    NAME,
    NAME_PATTERN,
    NAMESPACE,
    NAMESPACE_PATTERN,
    Artifacts,
    NoArtifacts,
    ReadFailure,
    layer_runs,
)
from burrito_py.server.reads import artifacts_of as shared_artifacts_of
from burrito_py.server.state_actions import LayerState, Refused
from burrito_py.server.views import (
    ErrorView,
    LayerDetailView,
    LayerView,
    OperationRequest,
    OperationView,
    OverrideRequest,
    OverrideView,
    RollbackRequest,
    RunDetailView,
    RunView,
    SyncView,
    layer_view,
    repository_key,
    run_summary,
    run_view,
)

log = logging.getLogger(__name__)

REALM = 'Bearer realm="burrito-py-server"'
_NAME, _NAMESPACE = NAME, NAMESPACE
MAX_ATTEMPT = 1_000_000  # the datastore's bound

PlanFormat = Literal["pretty", "json", "short", "masked-json"]
PLAN_MEDIA: dict[str, str] = {
    "pretty": "text/plain; charset=utf-8",
    "json": "application/json",
    "short": "text/plain; charset=utf-8",
    "masked-json": "application/json",
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


def _error(status: int, message: str, retry_after: int | None = None) -> JSONResponse:
    response = JSONResponse({"error": message}, status_code=status)
    if status == 401:
        response.headers["WWW-Authenticate"] = REALM
    if retry_after is not None:
        response.headers["Retry-After"] = str(retry_after)
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
            except (Problem, Refused) as exc:
                return _error(exc.status, str(exc))
            except Forbidden as exc:
                return _error(403, str(exc))
            except ReadFailure as exc:
                return _error(exc.status, str(exc))
            except Throttled as exc:
                return _error(429, str(exc), exc.retry_after)
            except AccessUnavailable as exc:
                log.warning("REST %s %s: cannot check access: %s", request.method, request.url.path, exc)
                return _error(503, f"cannot check the caller's access now: {exc}")
            except KubeError as exc:
                # The server's own rights or the API itself failed: not the caller's fault.
                log.warning(
                    "REST %s %s: Kubernetes API error %s %s", request.method, request.url.path, exc.status, exc.reason
                )
                return _error(502, f"the Kubernetes API answered {exc.status} {exc.reason}")

        return route


_bearer = HTTPBearer(
    auto_error=False,
    scheme_name="serviceAccountToken",
    description="A Kubernetes token accepted by a TokenReview for the server's audiences (burrito-py).",
)

_ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorView, "description": "A path or query parameter is invalid (the message names it)."},
    401: {"model": ErrorView, "description": "No bearer token, or one the Kubernetes API rejects."},
    403: {"model": ErrorView, "description": "The caller may not read or do this in that namespace (a runner may "
          "do nothing here); asked before the object is read, so it says nothing of its existence."},
    404: {"model": ErrorView, "description": "The layer, run, plan or log does not exist."},
    502: {"model": ErrorView, "description": "The Kubernetes API or the datastore failed."},
    429: {"model": ErrorView, "description": "Too many token reviews from this address or for this token "
          "(Retry-After says when to try again)."},
    503: {"model": ErrorView, "description": "The token or the caller's access cannot be checked now, or the "
          "datastore is unavailable."},
    # Declaring a catch-all also keeps FastAPI from documenting a 422 this router never sends.
    "default": {"model": ErrorView, "description": "Any other error."},
}
_TEXT = {"text/plain": {"schema": {"type": "string"}}}


def rest_router(
    kube: Kube,
    artifacts: Artifacts,
    authenticator: ThrottledAuthenticator | None,
    access: Access,
    namespaces: Sequence[str] = (),
) -> APIRouter:
    """`authenticator=None` disables auth (local tests only). `access` authorizes as the caller (and refuses
    runners). `namespaces` is the server's `namespaces` setting: when set, the API shows and syncs only layers and
    runs of these (the server's RBAC may cover no others), and reads repositories only there; empty, every
    namespace."""
    managed = frozenset(namespaces)

    def visible(namespace: str) -> bool:
        return not managed or namespace in managed

    states = LayerState(kube, artifacts, access, visible)
    router = APIRouter(prefix="/api", route_class=RestRoute, responses=_ERRORS, tags=["layers and runs"])

    async def caller(
        request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
    ) -> Principal:
        if authenticator is None:
            return AUTH_DISABLED
        # Through the Kubernetes API's service proxy (the CLI with only a kubeconfig: kube/service_proxy.py) the
        # API server drops `Authorization`; the same token comes in X-Burrito-Py-Authorization, as to the datastore.
        token = credentials.credentials if credentials else proxied_token(request.headers.get(PROXIED_AUTHORIZATION))
        if not token:
            raise Problem(401, MISSING_CREDENTIALS)
        try:
            who = await authenticator.authenticate(token, request.client.host if request.client else "")
        except Unauthenticated as exc:
            raise Problem(401, str(exc)) from None
        except AuthUnavailable as exc:
            log.warning("REST: cannot check a token: %s", exc)
            raise Problem(503, f"cannot check the token now: {exc}") from None
        refusal = access.refusal_of_identity(who)
        if refusal is not None:
            raise Problem(403, refusal)
        return who

    Caller = Annotated[Principal, Depends(caller)]

    def valid_repository(key: tuple[str, str]) -> bool:
        """A layer's repository reference is its author's text: only a valid namespace and name become a path on
        the API, and only in a namespace this server manages."""
        valid = bool(_NAMESPACE.fullmatch(key[0]) and _NAME.fullmatch(key[1])) and len(key[1]) <= 253
        return valid and visible(key[0])

    def by_key(objects: list[Body]) -> dict[tuple[str, str], Body]:
        return {(o["metadata"]["namespace"], o["metadata"]["name"]): o for o in objects}

    async def list_in(plural: str, namespaces: Sequence[str]) -> list[Body]:
        found = await asyncio.gather(*(kube.list(crd_path(plural, ns)) for ns in namespaces))
        return [item for items in found for item in items]

    async def repositories_for(who: Principal, layers: list[Body]) -> dict[tuple[str, str], Body]:
        """The repositories the layers name, read only in namespaces where the caller may get repositories (a
        layer may use another namespace's repository: its URL and state are that namespace's to show)."""
        keys = {key for key in map(repository_key, layers) if valid_repository(key)}
        readable = await access.namespaces_allowed(who, GET_REPOSITORIES, {key[0] for key in keys})
        return by_key(await list_in("terraformrepositories", sorted(readable)))

    async def layers_listed(who: Principal, namespace: str | None) -> list[Body]:
        if namespace is not None:
            await access.require(who, LIST_LAYERS, namespace)
            return await list_in("terraformlayers", [namespace]) if visible(namespace) else []
        if managed:
            allowed = await access.namespaces_allowed(who, LIST_LAYERS, managed)
            return await list_in("terraformlayers", sorted(allowed))
        if await access.allowed(who, LIST_LAYERS, ""):
            return await kube.list(crd_path("terraformlayers"))
        # Only where the caller may list: the server lists them all (one call), the caller sees their namespaces.
        every = await kube.list(crd_path("terraformlayers"))
        allowed = await access.namespaces_allowed(who, LIST_LAYERS, {item["metadata"]["namespace"] for item in every})
        return [item for item in every if item["metadata"]["namespace"] in allowed]

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

    async def run_and_artifacts(who: Principal, ns: str, name: str) -> tuple[Body, tuple[str, str]]:
        """The run, once the caller may get runs in its namespace, and where its artifacts are (its own namespace's
        layer: a run naming another namespace's has none, `artifacts_of`), once the caller may get runs there."""
        await access.require(who, GET_RUNS, ns)
        run = await run_or_404(ns, name)
        try:
            where = shared_artifacts_of(run, visible)
        except NoArtifacts as exc:
            raise Problem(404, str(exc)) from None
        await access.require(who, GET_RUNS, where[0])
        return run, where

    @router.get("/layers", response_model=list[LayerView], summary="List layers (optionally of one namespace).")
    async def list_layers(
        who: Caller,
        namespace: Annotated[
            str | None, Query(pattern=NAMESPACE_PATTERN, max_length=63, description="Only this namespace.")
        ] = None,
    ) -> list[LayerView]:
        layers = await layers_listed(who, namespace)
        repos = await repositories_for(who, layers)
        views = [layer_view(layer, repos.get(repository_key(layer))) for layer in layers]
        views.sort(key=lambda v: (v.namespace, v.name))
        # The list leaves out conditions (the detail has them): the model drops them.
        return [LayerView.model_validate(v.model_dump(include=set(LayerView.model_fields))) for v in views]

    @router.get("/layers/{ns}/{name}", response_model=LayerDetailView, summary="One layer, with its conditions.")
    async def get_layer(who: Caller, ns: Namespace, name: LayerName) -> LayerDetailView:
        await access.require(who, GET_LAYERS, ns)
        layer = await layer_or_404(ns, name)
        return layer_view(layer, (await repositories_for(who, [layer])).get(repository_key(layer)))

    @router.get(
        "/layers/{ns}/{name}/runs", response_model=list[RunView], summary="The layer's TerraformRuns, newest first."
    )
    async def list_layer_runs(who: Caller, ns: Namespace, name: LayerName) -> list[RunView]:
        await access.require(who, GET_LAYERS, ns)
        await access.require(who, LIST_RUNS, ns)
        await layer_or_404(ns, name)
        return [run_summary(r) for r in await layer_runs(kube, ns, name)]

    @router.post(
        "/layers/{ns}/{name}/sync",
        status_code=202,
        response_model=SyncView,
        responses={403: {"model": ErrorView, "description": "The caller may not patch terraformlayers there."}},
        summary="Plan the layer now (sets its sync-now annotation; the layer controller removes it).",
    )
    async def sync_layer(who: Caller, ns: Namespace, name: LayerName) -> SyncView:
        await access.require(who, PATCH_LAYERS, ns, fresh=True)
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
        responses={403: {"model": ErrorView, "description": "The caller may not patch terraformlayers there, or may "
                                                            "not override the denying policies."},
                   409: {"model": ErrorView, "description": "The plan is not the layer's current, denied plan."}},
        summary="Override a mandatory plan policy's denial of the current plan (it still needs an approval).",
    )
    async def override_plan(who: Caller, ns: Namespace, name: LayerName, body: OverrideRequest) -> OverrideView:
        await access.require(who, PATCH_LAYERS, ns, fresh=True)
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

    # A day-2 operation (docs/architecture.md §5.12) and a managed-state layer's versions, diff, download and rollback
    # (§10.6): every check is in `state_actions.LayerState`, shared with the UI; these routes only answer.
    @router.post(
        "/layers/{ns}/{name}/operations",
        status_code=202,
        response_model=OperationView,
        responses={400: {"model": ErrorView, "description": "The request is invalid: the field and the reason."},
                   403: {"model": ErrorView, "description": "The caller may not patch terraformlayers there."},
                   409: {"model": ErrorView, "description": "Another operation request waits on the layer."}},
        summary="Ask for a day-2 operation: import, state rm, state mv, a -replace/-target plan, force-unlock, "
                "migrate-state.",
    )
    async def request_operation(who: Caller, ns: Namespace, name: LayerName, body: OperationRequest) -> OperationView:
        return await states.request_operation(who, ns, name, body)

    @router.get("/layers/{ns}/{name}/state/versions", summary="The kept versions of a managed-state layer's state.")
    async def list_state_versions(who: Caller, ns: Namespace, name: LayerName) -> list[dict[str, Any]]:
        return await states.versions(who, ns, name)

    @router.get("/layers/{ns}/{name}/state/diff",
                summary="What changed between two versions of a layer's state: resources and attribute names.")
    async def state_version_diff(
        who: Caller, ns: Namespace, name: LayerName,
        from_serial: Annotated[int | None, Query(alias="from", ge=0, description="Older serial; unset: the version "
                                                 "before `to`.")] = None,
        to_serial: Annotated[int | None, Query(alias="to", ge=0, description="Newer serial; unset: the current "
                                               "version.")] = None,
    ) -> dict[str, Any]:
        return await states.diff(who, ns, name, from_serial, to_serial)

    @router.get("/layers/{ns}/{name}/state/versions/{serial}", response_class=JSONResponse,
                summary="One version of a layer's state as stored (needs get secrets: it holds every secret).")
    async def download_state_version(
        who: Caller, ns: Namespace, name: LayerName, serial: Annotated[int, PathParam(ge=0, le=10**20 - 1)],
    ) -> Response:
        data = await states.download(who, ns, name, serial)
        return Response(content=data, media_type="application/json",
                        headers={"Content-Disposition": f'attachment; filename="{name}-{serial}.tfstate"'})

    @router.post("/layers/{ns}/{name}/state/rollback", status_code=201,
                 summary="Restore an earlier version of a managed-state layer's state, as a new version.")
    async def rollback_state(who: Caller, ns: Namespace, name: LayerName, body: RollbackRequest) -> dict[str, Any]:
        return await states.roll_back(who, ns, name, body.serial)

    @router.get("/runs/{ns}/{run}", response_model=RunDetailView, summary="A run with its attempts.")
    async def get_run(who: Caller, ns: Namespace, run: RunName) -> RunDetailView:
        await access.require(who, GET_RUNS, ns)
        return run_view(await run_or_404(ns, run))

    @router.get(
        "/runs/{ns}/{run}/attempts/{n}/logs",
        response_class=PlainTextResponse,
        responses={200: {"content": _TEXT, "description": "The attempt's runner log (values from Secrets masked)."}},
        summary="The log of one attempt of a run.",
    )
    async def get_logs(who: Caller, ns: Namespace, run: RunName, n: AttemptNumber) -> Response:
        body, where = await run_and_artifacts(who, ns, run)
        data = await artifacts.logs(
            body, where, n, f"no logs for attempt {n} of TerraformRun {ns}/{run} (no such attempt, or not uploaded yet)"
        )
        return Response(content=data, media_type="text/plain; charset=utf-8")

    @router.get(
        "/runs/{ns}/{run}/plan",
        response_class=PlainTextResponse,
        responses={
            200: {
                "content": {**_TEXT, "application/json": {"schema": {"type": "object"}}},
                "description": "The latest plan of the run: text for pretty and short, the masked JSON document for "
                "masked-json, Terraform's own JSON for json.",
            }
        },
        summary="The latest plan of a run.",
    )
    async def get_plan(
        who: Caller,
        ns: Namespace,
        run: RunName,
        format: Annotated[PlanFormat, Query(
            description="pretty (terraform show), short (one line), masked-json (the plan model's document: "
            "values from Secrets and sensitive values masked; no prior state), each masked and needing get "
            "terraformruns; json (Terraform's JSON as stored: every variable value and the prior state) needs get "
            "secrets in the layer's namespace too.")] = "pretty",
    ) -> Response:
        body, where = await run_and_artifacts(who, ns, run)
        missing = f"no {format} plan for TerraformRun {ns}/{run}"
        if format == "json":
            try:
                await access.require(who, GET_SECRETS, where[0])
            except Forbidden as exc:
                raise Forbidden(f"{exc}: the stored plan JSON holds every variable's value and the prior state; "
                                "format=masked-json is the masked document") from None
            data = await artifacts.raw_plan(where, run, None, "json", missing)
        else:
            data = await artifacts.masked_plan(body, where, None, format, missing)
        return Response(content=data, media_type=PLAN_MEDIA[format])

    return router
