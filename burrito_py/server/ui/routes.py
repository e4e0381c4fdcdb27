"""The UI's routes under /ui/ (docs/architecture.md §11.4): pages, actions and server-sent events.

Every page, action and event stream is authorized as the logged-in user with a SubjectAccessReview in the
object's namespace (`server/access.py`, shared with the REST API): `get`/`list` for reads (lists show only the
namespaces the user may list in), `patch terraformlayers` for actions (asked afresh before each, with a CSRF token
bound to the browser's session). Runner identities may use nothing. Plans and logs are masked
(`reads.Artifacts`). Event streams are bounded per user and in total, end after a maximum lifetime (the browser
reconnects and is authorized again) and re-check the user's token and access while they run."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote

import jinja2
import pydantic
from fastapi import APIRouter, FastAPI, Request, Response
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.routing import APIRoute
from fastapi.staticfiles import StaticFiles

from burrito_py.api.sharing import shared_with
from burrito_py.datastore.auth import AUTH_DISABLED, AuthUnavailable, Principal, Unauthenticated
from burrito_py.datastore.review_throttle import Throttled, ThrottledAuthenticator
from burrito_py.kube.client import Body, Kube, KubeError, crd_path, path
from burrito_py.plans.masking import load_json, masked_model, scrub_text
from burrito_py.plans.model import PlanFormatError, parse_plan
from burrito_py.server.access import (
    GET_LAYERS,
    GET_REPOSITORIES,
    GET_RUNS,
    LIST_LAYERS,
    LIST_PULL_REQUESTS,
    LIST_RUNS,
    PATCH_LAYERS,
    Access,
    AccessUnavailable,
    Forbidden,
    Permission,
)
from burrito_py.server.layer_actions import LayerNotFound, NotPendingPlan, approve_pending_plan, request_sync
from burrito_py.server.reads import NAME, NAMESPACE, Artifacts, NoArtifacts, ReadFailure, artifacts_of, layer_runs
from burrito_py.server.settings import ServerSettings
from burrito_py.server.state_actions import LayerState, Refused
from burrito_py.server.ui.index import LayerIndex
from burrito_py.server.ui.queries import (
    DRIFTS,
    GROUP_TITLES,
    PAGE_SIZE,
    STATES,
    LayerQuery,
    LayerRow,
    approvals,
    layer_page,
    plan_groups,
    pull_request_rows,
)
from burrito_py.server.ui.session import CSRF_FIELD, CSRF_HEADER, Sessions, forwarded_identity
from burrito_py.server.ui.streams import BoundedStream, StreamLimits, TooManyStreams, bounded
from burrito_py.server.views import OperationRequest, layer_view, run_view

log = logging.getLogger(__name__)
HERE = Path(__file__).parent
PREFIX = "/ui"
LOG_DISPLAY_BYTES = 256 * 1024  # a page shows a log's tail; the download has it all
SSE_KEEPALIVE_SECONDS = 15.0
MAX_FORM_BYTES = 64 * 1024  # a token of a few KB is the largest field
RUN_POLL_SECONDS = 1.0
# What a live view reads of a running pod's log at most (`limitBytes`), each poll and in all: the pod writes what its
# tenant code likes, and every open view polls every second. The datastore has the whole log once the attempt ends.
LIVE_LOG_BYTES = 1024 * 1024
LIVE_LOG_CUT = "\n(the live view stops here, at {size} KiB: the whole log is shown once the attempt ends)\n"
DONE_STATES = ("Succeeded", "Failed")
# No inline script or style, nothing from another origin.
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "form-action 'self'; frame-ancestors 'none'; base-uri 'none'")


class UiProblem(Exception):
    def __init__(self, status: int, message: str, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.status, self.retry_after = status, retry_after


class LoginRequired(Exception):
    pass


# The day-2 operations form (docs/architecture.md §5.12): its choices, and the fields each one uses.
OPERATIONS = (("import", "import ADDRESS ID"), ("state-rm", "state rm ADDRESS"), ("state-mv", "state mv SOURCE "
              "DESTINATION"), ("plan", "plan -replace/-target"), ("force-unlock", "force-unlock LOCK_ID"))
OPERATION_FIELDS = {"import": ("address", "id"), "state-rm": ("address",), "state-mv": ("source", "destination"),
                    "plan": ("replace", "target"), "force-unlock": ("lock_id",)}


def operation_request(form: dict[str, str]) -> OperationRequest:
    """The REST body the form stands for: only the chosen operation's fields (the form shows them all), a list one
    address a line; then the same model and checks as `POST /api/layers/{ns}/{name}/operations`."""
    kind = form.get("operation", "")
    if kind not in OPERATION_FIELDS:
        raise Refused(400, f"operation: {kind[:40]!r} is not one of {', '.join(OPERATION_FIELDS)}")
    body: dict[str, Any] = {"operation": kind}
    for field in OPERATION_FIELDS[kind]:
        value = form.get(field, "")
        if field in ("replace", "target"):
            body[field] = [line.strip() for line in value.splitlines() if line.strip()]
        elif value != "":
            body[field] = value
    try:
        return OperationRequest.model_validate(body)
    except pydantic.ValidationError as exc:
        reasons = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
        raise Refused(400, reasons) from None


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(HERE / "templates"), autoescape=True, trim_blocks=True,
                             lstrip_blocks=True)
    env.globals.update(prefix=PREFIX, states=STATES, drifts=DRIFTS, group_titles=GROUP_TITLES,
                       q=lambda value: quote(str(value), safe=""))
    return env


async def read_form(request: Request) -> dict[str, str]:
    """An urlencoded form (the UI's forms are small): parsed here rather than through python-multipart, which
    the server would need for nothing else."""
    if not request.headers.get("content-type", "").startswith("application/x-www-form-urlencoded"):
        return {}
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            raise UiProblem(413, "the form is too large")
    return {k: v[0] for k, v in parse_qs(body.decode("utf-8", "replace"), max_num_fields=20).items()}


def _secured(response: Response) -> Response:
    response.headers.setdefault("Content-Security-Policy", CSP)
    response.headers.setdefault("X-Content-Type-Options", "nosniff")
    response.headers.setdefault("Referrer-Policy", "same-origin")
    response.headers.setdefault("Cache-Control", "no-store")
    return response


def on_trusted_listener(request: Request, settings: ServerSettings) -> bool:
    """Whether the request came in on the trusted-header listener (`ui_trusted_headers_port`), which only the
    authenticating proxy may reach: told by the port of the socket it arrived on, which no client can set."""
    server = request.scope.get("server")
    return bool(settings.ui_trusted_headers and server and server[1] == settings.ui_trusted_headers_port)


def client_address(request: Request) -> str:
    return request.client.host if request.client else ""


def ui_router(settings: ServerSettings, kube: Kube, artifacts: Artifacts,
              authenticator: ThrottledAuthenticator | None, access: Access) -> tuple[APIRouter, LayerIndex]:
    env = _environment()
    sessions = Sessions(settings.ui_session_key.get_secret_value() if settings.ui_session_key else None,
                        settings.ui_session_ttl_seconds, settings.ui_secure_cookies)
    managed = frozenset(settings.namespaces)
    index = LayerIndex(kube, settings.namespaces)
    limits = StreamLimits(settings.ui_max_streams, settings.ui_max_streams_per_user)
    states = LayerState(kube, artifacts, access, lambda namespace: not managed or namespace in managed)

    def visible(namespace: str) -> bool:
        return not managed or namespace in managed

    def render(request: Request, template: str, status: int = 200, who: Principal | None = None,
               **context: Any) -> HTMLResponse:
        response = HTMLResponse(status_code=status)
        sid = sessions.ensure_session_id(request, response)
        body = env.get_template(template).render(request=request, who=who, csrf=sessions.csrf_token(sid),
                                                 csrf_field=CSRF_FIELD, **context)
        response.body = response.render(body)
        response.headers["content-length"] = str(len(response.body))
        _secured(response)
        return response

    class UiRoute(APIRoute):
        """Login redirects, error pages and Kubernetes failures for every UI route."""

        def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
            handler = super().get_route_handler()

            async def route(request: Request) -> Response:
                try:
                    return _secured(await handler(request))
                except LoginRequired:
                    if request.headers.get("HX-Request") or request.url.path.endswith("/events"):
                        return _secured(Response("log in first", status_code=401, headers={"HX-Redirect":
                                                                                         f"{PREFIX}/login"}))
                    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
                    return _secured(RedirectResponse(f"{PREFIX}/login?next={quote(target, safe='')}", 303))
                except UiProblem as exc:
                    page = render(request, "error.html", exc.status, message=str(exc))
                    if exc.retry_after is not None:
                        page.headers["Retry-After"] = str(exc.retry_after)
                    return page
                except Forbidden as exc:
                    return render(request, "error.html", 403, message=str(exc))
                except ReadFailure as exc:
                    return render(request, "error.html", exc.status, message=str(exc))
                except TooManyStreams as exc:
                    return _secured(Response(str(exc), status_code=429, headers={"Retry-After": "10"}))
                except AccessUnavailable as exc:
                    log.warning("UI %s %s: cannot check access: %s", request.method, request.url.path, exc)
                    return render(request, "error.html", 503, message=f"cannot check your access now: {exc}")
                except KubeError as exc:
                    log.warning("UI %s %s: Kubernetes API error %s %s", request.method, request.url.path,
                                exc.status, exc.reason)
                    return render(request, "error.html", 502,
                                  message=f"the Kubernetes API answered {exc.status} {exc.reason}")

            return route

    router = APIRouter(prefix=PREFIX, route_class=UiRoute, include_in_schema=False)

    # -- who is asking ------------------------------------------------------------------------------------------
    async def identify(request: Request) -> Principal:
        # Only on the listener the authenticating proxy alone reaches: on the public port these headers are
        # anyone's to send, and are ignored.
        if on_trusted_listener(request, settings):
            forwarded = forwarded_identity(request)
            if forwarded is not None:
                return Principal(forwarded[0], groups=forwarded[1])
        if authenticator is None:
            return AUTH_DISABLED
        token = sessions.token(request)
        if token is None:
            raise LoginRequired
        try:
            return await authenticator.authenticate(token, client_address(request))
        except Unauthenticated:
            raise LoginRequired from None
        except Throttled as exc:
            raise UiProblem(429, str(exc), exc.retry_after) from None
        except AuthUnavailable as exc:
            raise UiProblem(503, f"cannot check your token now: {exc}") from None

    async def principal(request: Request) -> Principal:
        who = await identify(request)
        refusal = access.refusal_of_identity(who)
        if refusal is not None:
            raise UiProblem(403, refusal)
        return who

    async def may_act(who: Principal, namespace: str, *, fresh: bool = False) -> bool:
        return await access.allowed(who, PATCH_LAYERS, namespace, fresh=fresh)

    async def readable(who: Principal, permission: Permission, namespaces: set[str]) -> set[str]:
        return await access.namespaces_allowed(who, permission, namespaces)

    async def check_post(request: Request) -> tuple[Principal, dict[str, str]]:
        form = await read_form(request)
        if not sessions.csrf_valid(request, request.headers.get(CSRF_HEADER) or form.get(CSRF_FIELD)):
            raise UiProblem(403, "the form's CSRF token is missing or not this session's: reload the page")
        return await principal(request), form

    def check_names(*pairs: tuple[str, str]) -> None:
        for namespace, name in pairs:
            if not NAMESPACE.fullmatch(namespace) or not NAME.fullmatch(name) or len(name) > 253:
                raise UiProblem(404, f"{namespace}/{name} is not a valid namespace and name")
            if not visible(namespace):
                raise UiProblem(404, f"{namespace}/{name} is in a namespace this server does not manage")

    # -- login ----------------------------------------------------------------------------------------------------
    def safe_next(value: str | None) -> str:
        # Only a path of this UI: never an open redirect.
        return value if value and value.startswith(f"{PREFIX}/") and not value.startswith("//") else \
            f"{PREFIX}/layers"

    @router.get("")
    @router.get("/")
    async def home() -> Response:
        return RedirectResponse(f"{PREFIX}/layers", 303)

    @router.get("/login")
    async def login_form(request: Request, next: str | None = None) -> Response:
        return render(request, "login.html", next=safe_next(next), error="",
                      trusted_headers=on_trusted_listener(request, settings))

    @router.post("/login")
    async def login(request: Request) -> Response:
        form = await read_form(request)
        if not sessions.csrf_valid(request, form.get(CSRF_FIELD)):
            raise UiProblem(403, "the form's CSRF token is missing or not this session's: reload the page")
        token, target = form.get("token", "").strip(), safe_next(form.get("next"))
        if authenticator is None:
            raise UiProblem(400, "authentication is disabled on this server: nothing to log in to")
        try:
            who = await authenticator.authenticate(token, client_address(request)) if token else None
        except Unauthenticated:
            who = None
        except Throttled as exc:
            log.warning("UI: login throttled for %s: %s", client_address(request), exc)
            page = render(request, "login.html", 429, next=target, error=f"Too many attempts: {exc}.",
                          trusted_headers=on_trusted_listener(request, settings))
            page.headers["Retry-After"] = str(exc.retry_after)
            return page
        except AuthUnavailable as exc:
            raise UiProblem(503, f"cannot check the token now: {exc}") from None
        if who is None:
            # Never echo or log the token.
            return render(request, "login.html", 401, next=target, error="The Kubernetes API did not accept "
                          "this token (expired, revoked, or not for the audience burrito-py).",
                          trusted_headers=on_trusted_listener(request, settings))
        refusal = access.refusal_of_identity(who)
        if refusal is not None:
            return render(request, "login.html", 403, next=target, error=refusal,
                          trusted_headers=on_trusted_listener(request, settings))
        response = RedirectResponse(target, 303)
        sessions.log_in(request, response, token)
        log.info("UI: %s logged in", who.username)
        return response

    @router.post("/logout")
    async def logout(request: Request) -> Response:
        form = await read_form(request)
        if not sessions.csrf_valid(request, form.get(CSRF_FIELD)):
            raise UiProblem(403, "the form's CSRF token is missing or not this session's: reload the page")
        response = RedirectResponse(f"{PREFIX}/login", 303)
        sessions.log_out(response)
        return response

    # -- event streams ------------------------------------------------------------------------------------------
    def stream(request: Request, who: Principal, events: AsyncIterator[str],
               still_allowed: Callable[[Principal], Coroutine[Any, Any, bool]]) -> Response:
        """A bounded event stream (streams.py): counted for the user, ended after its lifetime, re-checked."""
        release = limits.acquire(who.username)

        async def check() -> bool:
            try:
                current = await principal(request)  # the token again (revoked: gone), and not a runner
            except LoginRequired:
                return False
            except UiProblem as exc:
                return exc.status != 403  # throttled or cannot check now (429, 503): ask again next time
            try:
                return current.username == who.username and await still_allowed(current)
            except AccessUnavailable:
                return True  # the API cannot answer now: keep the stream, ask again next time

        body = bounded(events, lifetime=settings.ui_stream_max_seconds,
                       recheck_seconds=settings.ui_stream_recheck_seconds, still_allowed=check)
        return BoundedStream(body, release, media_type="text/event-stream",
                             headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})

    # -- layers ------------------------------------------------------------------------------------------------
    async def visible_rows(who: Principal) -> list[LayerRow]:
        """The index's rows of the namespaces the user may list layers in (from cached answers when recent)."""
        rows = list(index.rows.values())
        allowed = await readable(who, LIST_LAYERS, {row.namespace for row in rows})
        return [row for row in rows if row.namespace in allowed]

    @router.get("/layers")
    async def layers(request: Request) -> Response:
        who = await principal(request)
        await index.ready()
        query = LayerQuery.from_params(request.query_params)
        page = layer_page(await visible_rows(who), query)
        template = "layers_table.html" if request.headers.get("HX-Target") == "layer-table" else "layers.html"
        return render(request, template, who=who, page=page, query=query, nav="layers")

    @router.get("/layers/events")
    async def layer_events(request: Request) -> Response:
        """A `row` event with the rendered row of each changed layer that the page's filters select and the user
        may list (the browser replaces the row it shows, if any), and an empty `html` for a layer deleted."""
        who = await principal(request)
        await index.ready()
        query = LayerQuery.from_params(request.query_params)
        template = env.get_template("layer_row.html")

        async def events() -> AsyncIterator[str]:
            async with index.subscribe() as queue:
                yield "retry: 3000\n\n"
                while not await request.is_disconnected():
                    try:
                        key = await asyncio.wait_for(queue.get(), SSE_KEEPALIVE_SECONDS)
                    except TimeoutError:
                        yield ": keep-alive\n\n"
                        continue
                    try:
                        if not await access.allowed(who, LIST_LAYERS, key[0]):
                            continue
                    except AccessUnavailable:
                        continue  # cannot tell now: send nothing of that namespace
                    row = index.rows.get(key)
                    if row is not None and not query.matches(row):
                        continue
                    html = template.render(row=row) if row is not None else ""
                    yield f"event: row\ndata: {json.dumps({'id': f'layer:{key[0]}/{key[1]}', 'html': html})}\n\n"

        async def still_allowed(_: Principal) -> bool:
            return True  # rows are authorized one by one; the token is checked by `stream`

        return stream(request, who, events(), still_allowed)

    @router.get("/layers/{ns}/{name}")
    async def layer(request: Request, ns: str, name: str) -> Response:
        who = await principal(request)
        check_names((ns, name))
        await access.require(who, GET_LAYERS, ns)
        body = await kube.get(crd_path("terraformlayers", ns, name))
        if body is None:
            raise UiProblem(404, f"TerraformLayer {ns}/{name} not found")
        may_list_runs = await access.allowed(who, LIST_RUNS, ns)
        runs = [run_view(r) for r in await layer_runs(kube, ns, name)] if may_list_runs else []
        status = body.get("status") or {}
        return render(request, "layer.html", who=who, nav="layers", layer=layer_view(body, None),
                      pending=status.get("pendingPlan") or {}, policy=status.get("policy") or {},
                      drift=status.get("drift") or {}, outputs=[o for o in status.get("outputs") or ()
                                                               if isinstance(o, str)],
                      runs=runs, may_list_runs=may_list_runs, may_act=await may_act(who, ns),
                      state=await state_section(who, body), operations=OPERATIONS)

    # -- managed state and day-2 operations (docs/architecture.md §5.12, §10.6, §11.4) --------------------------
    # Every check is `state_actions.LayerState`'s, the same the REST routes call; here only pages and forms.
    async def state_section(who: Principal, layer: Body) -> dict[str, Any]:
        """What the layer page shows of its state: the kept versions when the user may read them (none drawn
        otherwise, with why), and which buttons and links the user's (cached) permissions allow."""
        ns, name = layer["metadata"]["namespace"], layer["metadata"]["name"]
        section: dict[str, Any] = {"managed": await managed_state(who, layer), "versions": [], "error": ""}
        try:
            section["versions"] = list(reversed(await states.versions(who, ns, name)))  # newest first
        except Forbidden as exc:
            section["error"] = str(exc)
        except ReadFailure as exc:
            section["error"] = f"the state versions cannot be read now: {exc}"
        section["shown"] = section["managed"] or bool(section["versions"])
        if section["versions"]:
            section["may_download"] = await states.may_download(who, ns)
            section["may_roll_back"] = await states.may_roll_back(who, ns)
        return section

    async def managed_state(who: Principal, layer: Body) -> bool:
        """`state.managed` of the layer, else of its repository (docs/architecture.md §10.6). Another namespace's
        repository is read only where the user may get repositories, as the REST API reads it, and counts only when
        shared with the layer's namespace (else the layer cannot use it): what a layer names in another namespace
        must not tell its editor whether a repository of that name exists there."""
        own = ((layer.get("spec") or {}).get("state") or {}).get("managed")
        if own is not None:
            return bool(own)
        layer_ns = layer["metadata"]["namespace"]
        reference = (layer.get("spec") or {}).get("repository") or {}
        repo_ns = str(reference.get("namespace") or layer_ns)
        repo_name = str(reference.get("name") or "")
        if not repo_name or not NAMESPACE.fullmatch(repo_ns) or not NAME.fullmatch(repo_name) or not visible(repo_ns):
            return False
        if repo_ns != layer_ns and not await access.allowed(who, GET_REPOSITORIES, repo_ns):
            return False
        repository = await kube.get(crd_path("terraformrepositories", repo_ns, repo_name))
        if repository is None or not shared_with(repository, layer_ns):
            return False
        return bool(((repository.get("spec") or {}).get("state") or {}).get("managed"))

    def serial_of(value: str | None, field: str) -> int | None:
        if value is None or value == "":
            return None
        if not value.isdigit() or len(value) > 20:
            raise UiProblem(400, f"{field}: {value[:40]!r} is not a state serial (a whole number from 0)")
        return int(value)

    @router.get("/layers/{ns}/{name}/state/diff")
    async def state_diff_page(request: Request, ns: str, name: str) -> Response:
        who = await principal(request)
        check_names((ns, name))
        before = serial_of(request.query_params.get("from"), "from")
        after = serial_of(request.query_params.get("to"), "to")
        try:
            diff = await states.diff(who, ns, name, before, after)
        except Refused as exc:
            raise UiProblem(exc.status, str(exc)) from None
        return render(request, "state_diff.html", who=who, nav="layers", ns=ns, name=name, diff=diff)

    @router.get("/layers/{ns}/{name}/state/versions/{serial}")
    async def state_download(request: Request, ns: str, name: str, serial: str) -> Response:
        who = await principal(request)
        check_names((ns, name))
        number = serial_of(serial, "serial")
        assert number is not None
        try:
            data = await states.download(who, ns, name, number)
        except Refused as exc:
            raise UiProblem(exc.status, str(exc)) from None
        return Response(data, media_type="application/json", headers={
            "Content-Disposition": f'attachment; filename="{name}-{number}.tfstate"'})

    def done(request: Request, who: Principal, ns: str, name: str, message: str) -> Response:
        log.info("UI: %s: %s", who.username, message)
        if request.headers.get("HX-Request"):
            return HTMLResponse(env.get_template("notice.html").render(message=message))
        return render(request, "state_done.html", who=who, nav="layers", ns=ns, name=name, message=message)

    @router.post("/layers/{ns}/{name}/state/rollback")
    async def state_rollback(request: Request, ns: str, name: str) -> Response:
        who, form = await check_post(request)
        check_names((ns, name))
        serial = serial_of(form.get("serial"), "serial")
        if serial is None:
            raise UiProblem(400, "serial: which version to restore is missing")
        try:
            answer = await states.roll_back(who, ns, name, serial)
        except Refused as exc:
            raise UiProblem(exc.status, str(exc)) from None
        return done(request, who, ns, name, f"state of {ns}/{name} rolled back to version {serial}: new version "
                                            f"{answer.get('serial')}")

    @router.post("/layers/{ns}/{name}/operations")
    async def operation(request: Request, ns: str, name: str) -> Response:
        who, form = await check_post(request)
        check_names((ns, name))
        try:
            body = operation_request(form)
            answer = await states.request_operation(who, ns, name, body)
        except Refused as exc:
            raise UiProblem(exc.status, str(exc)) from None
        return done(request, who, ns, name, f"asked for {answer.operation} on {ns}/{name} (as {answer.by}); the "
                                            "controllers run it as a TerraformRun")

    async def act(request: Request, ns: str, name: str, action: Callable[[dict[str, str]], Coroutine[Any, Any, str]]
                  ) -> Response:
        who, form = await check_post(request)
        check_names((ns, name))
        if not await may_act(who, ns, fresh=True):
            raise UiProblem(403, f"{who.describe()} may not patch terraformlayers in the namespace {ns}")
        try:
            message = await action(form)
        except LayerNotFound as exc:
            raise UiProblem(404, str(exc)) from None
        except NotPendingPlan as exc:
            raise UiProblem(409, str(exc)) from None
        log.info("UI: %s: %s", who.username, message)
        if request.headers.get("HX-Request"):
            return HTMLResponse(env.get_template("notice.html").render(message=message))
        return RedirectResponse(safe_next(form.get("next")) if form.get("next") else f"{PREFIX}/layers/{ns}/{name}",
                                303)

    @router.post("/layers/{ns}/{name}/sync")
    async def sync(request: Request, ns: str, name: str) -> Response:
        async def run(_: dict[str, str]) -> str:
            await request_sync(kube, ns, name)
            return f"asked for a plan of {ns}/{name} now"

        return await act(request, ns, name, run)

    @router.post("/layers/{ns}/{name}/approve")
    async def approve(request: Request, ns: str, name: str) -> Response:
        async def run(form: dict[str, str]) -> str:
            plan_sum = form.get("sum", "")
            await approve_pending_plan(kube, ns, name, plan_sum)
            return f"approved plan {plan_sum} of {ns}/{name}"

        return await act(request, ns, name, run)

    # -- runs and plans ---------------------------------------------------------------------------------------
    async def run_and_artifacts(who: Principal, ns: str, name: str) -> tuple[Body, tuple[str, str]]:
        """The run, once the user may get runs in its namespace, and where its artifacts are (its own namespace's
        layer: a run naming another namespace's has none, `artifacts_of`), once the user may get runs there."""
        check_names((ns, name))
        await access.require(who, GET_RUNS, ns)
        found = await kube.get(crd_path("terraformruns", ns, name))
        if found is None:
            raise UiProblem(404, f"TerraformRun {ns}/{name} not found")
        try:
            where = artifacts_of(found, visible)
        except NoArtifacts as exc:
            raise UiProblem(404, str(exc)) from None
        await access.require(who, GET_RUNS, where[0])
        return found, where

    async def attempt_logs(run: Body, where: tuple[str, str]) -> dict[int, str]:
        view, found = run_view(run), {}
        uploaded = [attempt for attempt in view.attempts if attempt.logs_uploaded]
        hide = await artifacts.hidden_values(run, where) if uploaded else None
        for attempt in uploaded:
            try:
                data = await artifacts.logs(run, where, attempt.number, "", hide)
            except ReadFailure as exc:
                found[attempt.number] = f"(the log cannot be read now: {exc.status})"
                continue
            found[attempt.number] = data[-LOG_DISPLAY_BYTES:].decode("utf-8", "replace")
        return found

    @router.get("/runs/{ns}/{name}")
    async def run_page(request: Request, ns: str, name: str) -> Response:
        who = await principal(request)
        body, where = await run_and_artifacts(who, ns, name)
        view = run_view(body)
        return render(request, "run.html", who=who, nav="layers", run=view, logs=await attempt_logs(body, where),
                      live=view.state not in DONE_STATES)

    @router.get("/runs/{ns}/{name}/attempts/{number}/logs")
    async def run_log(request: Request, ns: str, name: str, number: int) -> Response:
        who = await principal(request)
        body, where = await run_and_artifacts(who, ns, name)
        data = await artifacts.logs(body, where, number, f"no log for attempt {number} of {ns}/{name}")
        return Response(data, media_type="text/plain; charset=utf-8", headers={
            "Content-Disposition": f'attachment; filename="{name}-{number}.log"'})

    @router.get("/runs/{ns}/{name}/events")
    async def run_events(request: Request, ns: str, name: str) -> Response:
        """`attempts` (the rendered attempts table) when the run changes, `log` {attempt, text} with what the
        running attempt's pod wrote since the last event (masked as the stored logs are), `done` when the run has
        finished."""
        who = await principal(request)
        first, where = await run_and_artifacts(who, ns, name)
        hide = await artifacts.hidden_values(first, where)
        table = env.get_template("attempts.html")

        async def events() -> AsyncIterator[str]:
            yield "retry: 3000\n\n"
            last, sent = "", dict[int, int]()
            while not await request.is_disconnected():
                body = await kube.get(crd_path("terraformruns", ns, name))
                if body is None:
                    yield "event: done\ndata: {}\n\n"
                    return
                view = run_view(body)
                shape = view.model_dump_json()
                if shape != last:
                    last = shape
                    yield f"event: attempts\ndata: {json.dumps({'html': table.render(run=view, prefix=PREFIX)})}\n\n"
                current = view.attempts[-1] if view.attempts else None
                if current is not None and not current.logs_uploaded and current.pod_name \
                        and sent.get(current.number, 0) >= 0:
                    raw = await pod_log(ns, current.pod_name)
                    # Whole lines only, masked one by one, each once: a value cut by the end of what the pod wrote
                    # so far is masked once its line is complete.
                    complete = raw[:raw.rfind("\n") + 1]
                    before = sent.get(current.number, 0)
                    text = "".join(scrub_text(line, hide) + "\n" for line in complete[before:].split("\n")[:-1])
                    sent[current.number] = max(before, len(complete))  # a rotated log never resends
                    if len(raw) >= LIVE_LOG_BYTES:
                        text += LIVE_LOG_CUT.format(size=LIVE_LOG_BYTES // 1024)
                        sent[current.number] = -1  # read no more of it
                    if text:
                        yield f"event: log\ndata: {json.dumps({'attempt': current.number, 'text': text})}\n\n"
                if view.state in DONE_STATES:
                    yield "event: done\ndata: {}\n\n"
                    return
                await asyncio.sleep(RUN_POLL_SECONDS)

        async def still_allowed(current: Principal) -> bool:
            return all([await access.allowed(current, GET_RUNS, ns), await access.allowed(current, GET_RUNS, where[0])])

        return stream(request, who, events(), still_allowed)

    async def pod_log(namespace: str, pod: str) -> str:
        """The first LIVE_LOG_BYTES of the pod's log (never more, whatever the API sends)."""
        try:
            text = await kube.read_text(path("v1", "pods", namespace, pod, "log"),
                                        query={"limitBytes": str(LIVE_LOG_BYTES)})
        except KubeError:
            return ""  # not started yet, or gone: the uploaded log follows
        return text[:LIVE_LOG_BYTES]

    @router.get("/runs/{ns}/{name}/plan")
    async def plan_page(request: Request, ns: str, name: str, attempt: int | None = None) -> Response:
        who = await principal(request)
        body, where = await run_and_artifacts(who, ns, name)
        missing = f"no plan stored for TerraformRun {ns}/{name}"
        artifacts.require_own(body, attempt, missing)  # shown masked, so of the run's own attempts only
        data = await artifacts.raw_plan(where, name, attempt, "json", missing)
        document = load_json(data)
        try:
            if document is None:
                raise PlanFormatError("(document): not a JSON object")
            hide = await artifacts.hidden_values(body, where, document, plan_attempt=attempt)
            plan = masked_model(parse_plan(document, attributes=True), hide)
        except PlanFormatError as exc:
            raise UiProblem(502, f"the stored plan cannot be read: {exc}") from None
        try:
            pretty = (await artifacts.masked_plan(body, where, attempt, "pretty", "")).decode("utf-8", "replace")
        except ReadFailure as exc:
            if exc.status != 404:
                raise
            pretty = ""
        return render(request, "plan.html", who=who, nav="layers", run=run_view(body), plan=plan,
                      groups=plan_groups(plan), pretty=pretty[-LOG_DISPLAY_BYTES:], attempt=attempt,
                      layer_ns=where[0], layer_name=where[1])

    @router.get("/runs/{ns}/{name}/plan/download")
    async def plan_download(request: Request, ns: str, name: str, format: str = "json",
                            attempt: int | None = None) -> Response:
        who = await principal(request)
        if format not in ("json", "pretty"):
            raise UiProblem(400, "format is json or pretty")
        body, where = await run_and_artifacts(who, ns, name)
        # Never the stored JSON (it holds every variable's value and the prior state): the masked document.
        data = await artifacts.masked_plan(body, where, attempt, "masked-json" if format == "json" else "pretty",
                                           f"no {format} plan stored for TerraformRun {ns}/{name}")
        media, suffix = ("application/json", "json") if format == "json" else ("text/plain; charset=utf-8", "txt")
        return Response(data, media_type=media, headers={
            "Content-Disposition": f'attachment; filename="{name}-plan.{suffix}"'})

    # -- approvals and pull requests -------------------------------------------------------------------------
    @router.get("/approvals")
    async def approvals_page(request: Request) -> Response:
        who = await principal(request)
        await index.ready()
        shown = {(row.namespace, row.name) for row in await visible_rows(who) if row.pending_sum}
        every = approvals(index.bodies[key] for key in list(index.bodies) if key in shown)
        pages = max(1, -(-len(every) // PAGE_SIZE))  # paged like the layers: the HTML stays small
        page = min(LayerQuery.from_params(request.query_params).page, pages)
        pending = every[(page - 1) * PAGE_SIZE:page * PAGE_SIZE]
        allowed = {ns for ns in {a.namespace for a in pending} if await may_act(who, ns)}
        return render(request, "approvals.html", who=who, nav="approvals", pending=pending, allowed_namespaces=allowed,
                      total=len(every), page=page, pages=pages)

    @router.get("/pull-requests")
    async def pull_requests_page(request: Request) -> Response:
        who = await principal(request)
        scopes: Sequence[str | None] = sorted(managed) or [None]
        found = await asyncio.gather(*(kube.list(crd_path("terraformpullrequests", ns)) for ns in scopes))
        every = [item for items in found for item in items]
        allowed = await readable(who, LIST_PULL_REQUESTS, {item["metadata"]["namespace"] for item in every})
        rows = pull_request_rows(item for item in every if item["metadata"]["namespace"] in allowed)
        return render(request, "pull_requests.html", who=who, nav="pulls", rows=rows)

    return router, index


def mount_ui(app: FastAPI, settings: ServerSettings, kube: Kube, artifacts: Artifacts,
             authenticator: ThrottledAuthenticator | None, access: Access) -> LayerIndex:
    router, index = ui_router(settings, kube, artifacts, authenticator, access)
    app.include_router(router)
    app.mount(f"{PREFIX}/static", StaticFiles(directory=HERE / "static"), name="ui-static")
    return index
