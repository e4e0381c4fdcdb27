"""The UI's routes under /ui/ (docs/architecture.md §11.4): pages, actions and server-sent events.

Reading needs a logged-in user (any identity the TokenReview accepts, as the REST API); acting (sync, approve)
needs `patch terraformlayers` in the layer's namespace for that user, asked of the API with a SubjectAccessReview
before each action, and a CSRF token bound to the browser's session."""

from __future__ import annotations

import asyncio
import functools
import json
import logging
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote

import anyio.to_thread
import jinja2
from fastapi import APIRouter, FastAPI, Request, Response
from fastapi.responses import HTMLResponse, RedirectResponse, StreamingResponse
from fastapi.routing import APIRoute
from fastapi.staticfiles import StaticFiles

from burrito_py.controllers.kube import Body, Kube, KubeError, crd_path, path
from burrito_py.datastore.auth import (
    AUTH_DISABLED,
    Authenticator,
    AuthUnavailable,
    Principal,
    Unauthenticated,
)
from burrito_py.datastore.client import DatastoreClient, DatastoreError
from burrito_py.plans.model import PlanFormatError, parse_plan
from burrito_py.server.layer_actions import LayerNotFound, NotPendingPlan, approve_pending_plan, request_sync
from burrito_py.server.reads import NAME, NAMESPACE, NoArtifacts, artifacts_of, layer_runs
from burrito_py.server.rest import is_runner
from burrito_py.server.settings import ServerSettings
from burrito_py.server.ui.access import AccessReviewer, User
from burrito_py.server.ui.index import LayerIndex
from burrito_py.server.ui.queries import (
    DRIFTS,
    GROUP_TITLES,
    PAGE_SIZE,
    STATES,
    LayerQuery,
    approvals,
    layer_page,
    plan_groups,
    pull_request_rows,
)
from burrito_py.server.ui.session import CSRF_FIELD, CSRF_HEADER, Sessions, forwarded_identity
from burrito_py.server.views import layer_view, run_view

log = logging.getLogger(__name__)
HERE = Path(__file__).parent
PREFIX = "/ui"
LOG_DISPLAY_BYTES = 256 * 1024  # a page shows a log's tail; the download has it all
SSE_KEEPALIVE_SECONDS = 15.0
MAX_FORM_BYTES = 64 * 1024  # a token of a few KB is the largest field
RUN_POLL_SECONDS = 1.0
DONE_STATES = ("Succeeded", "Failed")
# No inline script or style, nothing from another origin.
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "form-action 'self'; frame-ancestors 'none'; base-uri 'none'")


class UiProblem(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class LoginRequired(Exception):
    pass


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


def ui_router(settings: ServerSettings, kube: Kube, datastore: DatastoreClient,
              authenticator: Authenticator | None) -> tuple[APIRouter, LayerIndex]:
    env = _environment()
    sessions = Sessions(settings.ui_session_key.get_secret_value() if settings.ui_session_key else None,
                        settings.ui_session_ttl_seconds, settings.ui_secure_cookies)
    reviewer = AccessReviewer(kube)
    managed = frozenset(settings.namespaces)
    index = LayerIndex(kube, settings.namespaces)

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
                    return render(request, "error.html", exc.status, message=str(exc))
                except KubeError as exc:
                    log.warning("UI %s %s: Kubernetes API error %s %s", request.method, request.url.path,
                                exc.status, exc.reason)
                    return render(request, "error.html", 502,
                                  message=f"the Kubernetes API answered {exc.status} {exc.reason}")

            return route

    router = APIRouter(prefix=PREFIX, route_class=UiRoute, include_in_schema=False)

    # -- who is asking ------------------------------------------------------------------------------------------
    async def principal(request: Request) -> Principal:
        if settings.ui_trusted_headers:
            forwarded = forwarded_identity(request)
            if forwarded is not None:
                return Principal(forwarded[0], groups=forwarded[1])
        if authenticator is None:
            return AUTH_DISABLED
        token = sessions.token(request)
        if token is None:
            raise LoginRequired
        try:
            return await authenticator.authenticate(token)
        except Unauthenticated:
            raise LoginRequired from None
        except AuthUnavailable as exc:
            raise UiProblem(503, f"cannot check your token now: {exc}") from None

    def user_of(who: Principal) -> User:
        return User(who.username, who.groups)

    async def may_act(who: Principal, namespace: str, *, fresh: bool = False) -> bool:
        if who is AUTH_DISABLED:
            return True  # auth off (local tests only), as the REST API
        if is_runner(who, settings.runner_service_account):
            return False
        return await reviewer.may_patch_layers(user_of(who), namespace, fresh=fresh)

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

    async def from_datastore(call: Callable[[], bytes], missing: str) -> bytes:
        try:
            return await anyio.to_thread.run_sync(call)
        except DatastoreError as exc:
            if exc.status_code == 404:
                raise UiProblem(404, missing) from None
            log.warning("UI: datastore error: %s", exc)
            raise UiProblem(503 if exc.status_code is None else 502, "the datastore is unavailable") from None

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
                      trusted_headers=settings.ui_trusted_headers)

    @router.post("/login")
    async def login(request: Request) -> Response:
        form = await read_form(request)
        if not sessions.csrf_valid(request, form.get(CSRF_FIELD)):
            raise UiProblem(403, "the form's CSRF token is missing or not this session's: reload the page")
        token, target = form.get("token", "").strip(), safe_next(form.get("next"))
        if authenticator is None:
            raise UiProblem(400, "authentication is disabled on this server: nothing to log in to")
        try:
            who = await authenticator.authenticate(token) if token else None
        except Unauthenticated:
            who = None
        except AuthUnavailable as exc:
            raise UiProblem(503, f"cannot check the token now: {exc}") from None
        if who is None:
            # Never echo or log the token.
            return render(request, "login.html", 401, next=target, error="The Kubernetes API did not accept "
                          "this token (expired, revoked, or not for the audience burrito-py).",
                          trusted_headers=settings.ui_trusted_headers)
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

    # -- layers ------------------------------------------------------------------------------------------------
    @router.get("/layers")
    async def layers(request: Request) -> Response:
        who = await principal(request)
        await index.ready()
        query = LayerQuery.from_params(request.query_params)
        page = layer_page(index.rows.values(), query)
        template = "layers_table.html" if request.headers.get("HX-Target") == "layer-table" else "layers.html"
        return render(request, template, who=who, page=page, query=query, nav="layers")

    @router.get("/layers/events")
    async def layer_events(request: Request) -> Response:
        """A `row` event with the rendered row of each changed layer that the page's filters select (the browser
        replaces the row it shows, if any), and an empty `html` for a layer deleted."""
        await principal(request)
        await index.ready()
        query = LayerQuery.from_params(request.query_params)
        template = env.get_template("layer_row.html")

        async def events(queue: asyncio.Queue[tuple[str, str]]) -> AsyncIterator[str]:
            yield "retry: 3000\n\n"
            while not await request.is_disconnected():
                try:
                    key = await asyncio.wait_for(queue.get(), SSE_KEEPALIVE_SECONDS)
                except TimeoutError:
                    yield ": keep-alive\n\n"
                    continue
                row = index.rows.get(key)
                if row is not None and not query.matches(row):
                    continue
                html = template.render(row=row) if row is not None else ""
                yield f"event: row\ndata: {json.dumps({'id': f'layer:{key[0]}/{key[1]}', 'html': html})}\n\n"

        return _stream(index, events)

    @router.get("/layers/{ns}/{name}")
    async def layer(request: Request, ns: str, name: str) -> Response:
        who = await principal(request)
        check_names((ns, name))
        body = await kube.get(crd_path("terraformlayers", ns, name))
        if body is None:
            raise UiProblem(404, f"TerraformLayer {ns}/{name} not found")
        runs = [run_view(r) for r in await layer_runs(kube, ns, name)]
        status = body.get("status") or {}
        return render(request, "layer.html", who=who, nav="layers", layer=layer_view(body, None),
                      pending=status.get("pendingPlan") or {}, policy=status.get("policy") or {},
                      drift=status.get("drift") or {}, outputs=[o for o in status.get("outputs") or ()
                                                               if isinstance(o, str)],
                      runs=runs, may_act=await may_act(who, ns))

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
    async def run_or_404(ns: str, name: str) -> Body:
        check_names((ns, name))
        found = await kube.get(crd_path("terraformruns", ns, name))
        if found is None:
            raise UiProblem(404, f"TerraformRun {ns}/{name} not found")
        return found

    def location(run: Body) -> tuple[str, str]:
        try:
            return artifacts_of(run, visible)
        except NoArtifacts as exc:
            raise UiProblem(404, str(exc)) from None

    async def attempt_logs(run: Body) -> dict[int, str]:
        layer_ns, layer_name = location(run)
        view, found = run_view(run), {}
        for attempt in view.attempts:
            if not attempt.logs_uploaded:
                continue
            try:
                data = await anyio.to_thread.run_sync(functools.partial(
                    datastore.get_logs, layer_ns, layer_name, view.name, attempt.number))
            except DatastoreError as exc:
                found[attempt.number] = f"(the log cannot be read now: {exc.status_code or 'unavailable'})"
                continue
            found[attempt.number] = data[-LOG_DISPLAY_BYTES:].decode("utf-8", "replace")
        return found

    @router.get("/runs/{ns}/{name}")
    async def run_page(request: Request, ns: str, name: str) -> Response:
        who = await principal(request)
        body = await run_or_404(ns, name)
        view = run_view(body)
        return render(request, "run.html", who=who, nav="layers", run=view, logs=await attempt_logs(body),
                      live=view.state not in DONE_STATES)

    @router.get("/runs/{ns}/{name}/attempts/{number}/logs")
    async def run_log(request: Request, ns: str, name: str, number: int) -> Response:
        await principal(request)
        layer_ns, layer_name = location(await run_or_404(ns, name))
        data = await from_datastore(functools.partial(datastore.get_logs, layer_ns, layer_name, name, number),
                                    f"no log for attempt {number} of {ns}/{name}")
        return Response(data, media_type="text/plain; charset=utf-8", headers={
            "Content-Disposition": f'attachment; filename="{name}-{number}.log"'})

    @router.get("/runs/{ns}/{name}/events")
    async def run_events(request: Request, ns: str, name: str) -> Response:
        """`attempts` (the rendered attempts table) when the run changes, `log` {attempt, text} with what the
        running attempt's pod wrote since the last event, `done` when the run has finished."""
        await principal(request)
        await run_or_404(ns, name)
        table = env.get_template("attempts.html")

        async def events(_: object) -> AsyncIterator[str]:
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
                if current is not None and not current.logs_uploaded and current.pod_name:
                    text = await pod_log(ns, current.pod_name)
                    before = sent.get(current.number, 0)
                    if len(text) > before:
                        sent[current.number] = len(text)
                        yield f"event: log\ndata: {json.dumps({'attempt': current.number, 'text': text[before:]})}\n\n"
                if view.state in DONE_STATES:
                    yield "event: done\ndata: {}\n\n"
                    return
                await asyncio.sleep(RUN_POLL_SECONDS)

        return _stream(None, events)

    async def pod_log(namespace: str, pod: str) -> str:
        try:
            return await kube.read_text(path("v1", "pods", namespace, pod, "log"))
        except KubeError:
            return ""  # not started yet, or gone: the uploaded log follows

    @router.get("/runs/{ns}/{name}/plan")
    async def plan_page(request: Request, ns: str, name: str, attempt: int | None = None) -> Response:
        who = await principal(request)
        body = await run_or_404(ns, name)
        layer_ns, layer_name = location(body)
        data = await from_datastore(
            functools.partial(datastore.get_plan, layer_ns, layer_name, name, attempt, "json"),
            f"no plan stored for TerraformRun {ns}/{name}")
        try:
            plan = parse_plan(data)
        except PlanFormatError as exc:
            raise UiProblem(502, f"the stored plan cannot be read: {exc}") from None
        try:
            pretty = (await anyio.to_thread.run_sync(functools.partial(
                datastore.get_plan, layer_ns, layer_name, name, attempt, "pretty"))).decode("utf-8", "replace")
        except DatastoreError:
            pretty = ""
        return render(request, "plan.html", who=who, nav="layers", run=run_view(body), plan=plan,
                      groups=plan_groups(plan), pretty=pretty[-LOG_DISPLAY_BYTES:], attempt=attempt,
                      layer_ns=layer_ns, layer_name=layer_name)

    @router.get("/runs/{ns}/{name}/plan/download")
    async def plan_download(request: Request, ns: str, name: str, format: str = "json",
                            attempt: int | None = None) -> Response:
        await principal(request)
        if format not in ("json", "pretty"):
            raise UiProblem(400, "format is json or pretty")
        layer_ns, layer_name = location(await run_or_404(ns, name))
        data = await from_datastore(
            functools.partial(datastore.get_plan, layer_ns, layer_name, name, attempt, format),  # type: ignore[arg-type]
            f"no {format} plan stored for TerraformRun {ns}/{name}")
        if format == "json":  # the stored JSON holds sensitive values: download only what the model masked
            data = json.dumps(parse_plan(data).policy_input(), indent=2).encode()
        media, suffix = ("application/json", "json") if format == "json" else ("text/plain; charset=utf-8", "txt")
        return Response(data, media_type=media, headers={
            "Content-Disposition": f'attachment; filename="{name}-plan.{suffix}"'})

    # -- approvals and pull requests -------------------------------------------------------------------------
    @router.get("/approvals")
    async def approvals_page(request: Request) -> Response:
        who = await principal(request)
        await index.ready()
        every = approvals(index.bodies[key] for key in list(index.bodies) if index.rows[key].pending_sum)
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
        rows = pull_request_rows(item for items in found for item in items)
        return render(request, "pull_requests.html", who=who, nav="pulls", rows=rows)

    return router, index


def _stream(index: LayerIndex | None, events: Callable[[Any], AsyncIterator[str]]) -> Response:
    async def body() -> AsyncIterator[str]:
        if index is None:
            async for chunk in events(None):
                yield chunk
            return
        async with index.subscribe() as queue:
            async for chunk in events(queue):
                yield chunk

    return StreamingResponse(body(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})


def mount_ui(app: FastAPI, settings: ServerSettings, kube: Kube, datastore: DatastoreClient,
             authenticator: Authenticator | None) -> LayerIndex:
    router, index = ui_router(settings, kube, datastore, authenticator)
    app.include_router(router)
    app.mount(f"{PREFIX}/static", StaticFiles(directory=HERE / "static"), name="ui-static")
    return index
