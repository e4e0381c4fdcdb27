"""The datastore's HTTP API (docs/architecture.md §10): plans, logs, apply outputs and source archives,
streamed both ways.

Outputs (`terraform output -json` of a successful apply) hold sensitive values: like plans, they are stored
(encrypted when encryption is on) and served to authorized callers, and never logged."""

from __future__ import annotations

import base64
import binascii
import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, get_args
from urllib.parse import unquote_to_bytes

from fastapi import APIRouter, Depends, FastAPI, Header, Query, Request, Response
from fastapi import Path as PathParam
from fastapi.responses import JSONResponse, StreamingResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from fastapi.security.utils import get_authorization_scheme_param
from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict
from starlette.datastructures import Headers
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Receive, Scope, Send

from burrito_py.datastore.auth import (
    Action,
    Authenticator,
    AuthError,
    LayerArtifacts,
    Principal,
    Sources,
    Target,
    authorize,
    principal_of,
    proxied_token,
)
from burrito_py.datastore.encryption import EncryptionError
from burrito_py.datastore.quota import NamespaceUsage, allowance, describe_bytes, run_used
from burrito_py.datastore.read_cache import CachedStorage, Held, with_read_cache
from burrito_py.datastore.review_throttle import Throttled, ThrottledAuthenticator
from burrito_py.datastore.storage import DeleteFailed, Exists, Mismatch, ObjectInfo, Storage, Stored, TooLarge
from burrito_py.kube.pod_paths import pod_path_setting
from burrito_py.kube.service_proxy import PROXIED_AUTHORIZATION
from burrito_py.plans.limits import PLAN_JSON_LIMIT

if TYPE_CHECKING:
    from burrito_py.kube.metrics_auth import MetricsGate

log = logging.getLogger(__name__)

PlanFormat = Literal["bin", "json", "pretty", "short"]
PLAN_FILES: dict[str, tuple[str, str]] = {
    "bin": ("plan.bin", "application/octet-stream"),
    "json": ("plan.json", "application/json"),
    "pretty": ("plan.txt", "text/plain; charset=utf-8"),
    "short": ("short.txt", "text/plain; charset=utf-8"),
}
TEXT = "text/plain; charset=utf-8"
OUTPUTS_FILE = "outputs.json"
LOG_FILE = "run.log"
APPLIED_FILE = "applied.json"
REVIEW_FILE = "review.json"
INPUTS_FILE = "inputs.json"
TREE_HEADER = "X-Burrito-Tree-Id"

SHA_HEADER = "X-Burrito-Sha256"
# Small records, bounded here rather than by a setting.
SHORT_LIMIT = 4096
APPLIED_LIMIT = 4096
REVIEW_LIMIT = 256 * 1024
INPUTS_LIMIT = 8 * 1024 * 1024  # varsFrom Secrets and ConfigMaps are each at most 1 MiB; a few of them

_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
# No leading "-": an id that reads as a command-line option is never a commit or tree id.
_REVISION = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$")
_CONTROL = re.compile(rb"[\x00-\x1f\x7f]")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


class DatastoreSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="BURRITO_PY_DATASTORE_", extra="ignore")

    @field_validator("data_dir", "kubeconfig", "tls_cert_file", "tls_key_file", "upstream_ca_file", mode="after")
    @classmethod
    def _inside_the_pod(cls, value: Path | None) -> Path | None:
        # Under the local kubelet a pod's absolute paths live below its private root (identity elsewhere).
        return pod_path_setting(value)

    data_dir: Path = Path("/var/lib/burrito-py/datastore")
    host: str = "0.0.0.0"  # noqa: S104 - a server in a pod listens on all interfaces
    port: int = 8080
    max_body_bytes: int = Field(
        100 * 1024 * 1024, ge=1, description="Largest upload accepted where no other limit says less: source "
        "archives (413 above).")
    # Per format (docs/architecture.md §10.1): what a runner may store per attempt, and what a reader (the
    # controllers' review, the UI) may have to hold. A 413 names the limit.
    max_plan_bytes: int = Field(64 * 1024 * 1024, ge=1, description="Largest binary plan (plan.bin) accepted.")
    max_plan_json_bytes: int = Field(
        PLAN_JSON_LIMIT, ge=1, description="Largest plan JSON (terraform show -json) accepted. Parsing it costs "
        "about 23 times its size in memory, and the controllers never parse one above this size: keep it well "
        "under a twentieth of their memory limit.")
    max_plan_text_bytes: int = Field(16 * 1024 * 1024, ge=1, description="Largest human-readable plan accepted.")
    max_log_bytes: int = Field(
        32 * 1024 * 1024, ge=1, description="Largest attempt log accepted (the controllers keep the end of a "
        "longer one).")
    max_outputs_bytes: int = Field(4 * 1024 * 1024, ge=1, description="Largest `terraform output -json` accepted.")
    max_state_bytes: int = Field(
        32 * 1024 * 1024, ge=1, description="Largest Terraform state a managed-state layer may post (413 above). A "
        "posted state is held whole until stored (its JSON read as a stream: measured about twice its size at peak), "
        "and a replica holds at most 4 times this at once (503 beyond): keep 8 times it well under its memory limit.")
    state_versions_kept: int = Field(
        100, ge=1, description="Versions of a managed-state layer's state kept (the newest; older ones are deleted "
        "after each write).")
    run_quota_bytes: int = Field(
        256 * 1024 * 1024, ge=0, description="Stored bytes a run's runner may bring its run to (every attempt, "
        "every object; 413 above); 0: no quota.")
    namespace_quota_bytes: int = Field(
        5 * 1024**3, ge=0, description="Stored bytes runners may bring a namespace's layers to (413 above); 0: no "
        "quota. Counted per datastore replica and listed again every quotaRecountSeconds, so approximate.")
    quota_recount_seconds: float = Field(
        300.0, ge=0, description="How long a namespace's stored-bytes count is used before it is listed again.")
    # Overload and slow clients (docs/architecture.md §10.7).
    max_active_requests: int = Field(
        64, ge=1, description="Requests served at once; more wait in a queue (first come, first served).")
    max_queued_requests: int = Field(
        512, ge=0, description="Requests waiting for their turn at most; more are answered 503 with Retry-After at "
        "once.")
    queue_timeout_seconds: float = Field(
        10.0, gt=0, description="Longest wait in the queue; then 503 with Retry-After.")
    header_timeout_seconds: float = Field(
        10.0, gt=0, description="Time a client has to send complete request headers, from connecting (or from its "
        "next request's first byte); then the connection is closed.")
    read_timeout_seconds: float = Field(
        60.0, gt=0, description="Longest pause in a request body the datastore waits for; then the connection is "
        "closed and the upload leaves nothing.")
    write_timeout_seconds: float = Field(
        60.0, gt=0, description="Longest time a client may leave the response unread while the datastore has more "
        "to send; then the connection is closed.")
    # The read cache (docs/architecture.md §10.8): small attempt objects and run listings, after authorization.
    read_cache_max_bytes: int = Field(
        32 * 1024 * 1024, ge=0, description="Memory the read cache of attempt objects and run listings may hold "
        "(bytes, plaintext); 0: no cache.")
    read_cache_max_object_bytes: int = Field(
        1024 * 1024, ge=0, description="Largest object the read cache keeps (bytes); larger ones are always "
        "streamed from storage.")
    read_cache_ttl_seconds: float = Field(
        5.0, ge=0, description="How long a cached object or run listing is served: the longest another replica's "
        "write or delete can go unseen here (this replica's own are seen at once); 0: no cache.")
    # Bearer tokens checked by a Kubernetes TokenReview (docs/architecture.md §10.2); off only for tests that do not
    # test auth.
    auth_enabled: bool = True
    auth_audiences: list[str] = Field(
        default_factory=lambda: ["burrito-py"], min_length=1, description="Token audiences the TokenReview accepts."
    )
    # Identities that may read and write everything (JSON list in the environment).
    auth_admin_users: list[str] = Field(
        default_factory=lambda: [
            "system:serviceaccount:burrito-py:burrito-py-controllers",
            "system:serviceaccount:burrito-py:burrito-py-server",
        ]
    )
    auth_admin_groups: list[str] = Field(
        default_factory=list, description="Groups whose members may read and write everything."
    )
    # The controllers' runner_service_account: only pod-bound tokens of this account can be runners (§10.2).
    auth_runner_service_account: str = Field("burrito-py-runner", min_length=1)
    # The controllers' runner_pull_request_service_account: pull requests' runs run as it (issue 24, P2).
    auth_runner_pull_request_service_account: str = Field("burrito-py-runner-pr", min_length=1)
    # The controllers' allow_cross_namespace_repositories (the chart passes the same value): without it a runner reads
    # sources of its own namespace's repositories only, whatever its layer names now (§10.2).
    auth_allow_cross_namespace_repositories: bool = Field(
        False, description="Let a runner read the sources of a repository of another namespace that its layer names.")
    auth_cache_ttl_seconds: float = Field(30.0, ge=0, description="How long an accepted token is remembered.")
    # Token reviews of tokens the cache does not know, per client address (§10.2): a runner pod sending made-up tokens
    # would otherwise have the datastore send the Kubernetes API one TokenReview each. Accepted tokens cost nothing.
    auth_review_burst: int = Field(
        100, ge=1, description="Reviews of tokens that are then refused, at once, per client address (429 beyond).")
    auth_reviews_per_minute: float = Field(
        600.0, gt=0, description="How fast a client address's allowance of refused token reviews refills.")
    auth_negative_cache_ttl_seconds: float = Field(5.0, ge=0, description="How long a rejected token is remembered.")
    # Where the Kubernetes API is for TokenReviews: this kubeconfig, else $KUBECONFIG, else in-cluster.
    kubeconfig: Path | None = None
    # HTTPS (the provider network mirror protocol requires it): a second listener serving the same API.
    tls_port: int = Field(0, ge=0, le=65535, description="HTTPS port; 0: no HTTPS listener.")
    tls_cert_file: Path | None = None
    tls_key_file: Path | None = None
    # The read-through caches (docs/architecture.md §10.5).
    provider_cache_enabled: bool = False
    provider_cache_registries: list[str] = Field(
        default_factory=lambda: ["registry.terraform.io", "registry.opentofu.org"],
        description="Registry host names the provider mirror reads through (others: 404).",
    )
    provider_cache_registry_urls: dict[str, str] = Field(
        default_factory=dict,
        description="Registry host name → the URL it is served at, when not https://<host> (its host is then also "
        "read through).",
    )
    provider_cache_index_ttl_seconds: float = Field(600.0, ge=0, description="Age after which an index is read again.")
    # Bounded by default: runner pods (tenant code) choose what the mirrors read through, and the volume they fill
    # also holds every tenant's plans, logs and state. 20 GiB holds about a hundred large provider archives (an
    # AWS provider's is ~150 MiB per version); 5 GiB some fifty Terraform/OpenTofu/Terragrunt releases.
    provider_cache_max_bytes: int = Field(20 * 1024**3, ge=0, description="Provider archives kept at most (bytes), "
                                          "least recently served evicted first; 0: unbounded.")
    provider_cache_url_ttl_seconds: float = Field(
        3600.0, gt=0, description="How long an archive URL handed out by a version document may be used."
    )
    provider_cache_url_key: SecretStr | None = Field(
        default=None, description="Key signing archive URLs (every replica the same); unset: derived from the HTTPS "
        "key file, else random per process.",
    )
    tool_cache_enabled: bool = False
    tool_cache_max_bytes: int = Field(5 * 1024**3, ge=0, description="Tool archives kept at most (bytes), least "
                                      "recently served evicted first; 0: unbounded.")
    tool_cache_terraform_url: str = Field(
        "https://releases.hashicorp.com",
        description="Where Terraform releases are read (releases.hashicorp.com's layout: terraform/index.json, "
        "terraform/<v>/terraform_<v>_<os>_<arch>.zip and …_SHA256SUMS); a private mirror of it, say.",
    )
    tool_cache_opentofu_url: str = Field(
        "https://github.com/opentofu/opentofu/releases/download",
        description="Where OpenTofu release files are read: v<v>/tofu_<v>_<os>_<arch>.zip and "
        "v<v>/tofu_<v>_SHA256SUMS under it (GitHub's release downloads, never its API).",
    )
    tool_cache_opentofu_index_url: str = Field(
        "https://get.opentofu.org/tofu/api.json",
        description="OpenTofu's version list (get.opentofu.org's api.json: {versions: [{id}]}).",
    )
    tool_cache_terragrunt_url: str = Field(
        "https://github.com/gruntwork-io/terragrunt/releases/download",
        description="Where Terragrunt release files are read: v<v>/terragrunt_<os>_<arch> (the bare binary) and "
        "v<v>/SHA256SUMS under it (GitHub's release downloads).",
    )
    tool_cache_terragrunt_index_url: str = Field(
        "https://api.github.com/repos/gruntwork-io/terragrunt/releases?per_page=100",
        description="Terragrunt's version list, in GitHub's releases API shape ([{tag_name: v<v>}]); read by the "
        "datastore once per index TTL, never by a runner.",
    )
    # Extra CAs trusted for upstream registries and release sites (a private registry's; the tests').
    upstream_ca_file: Path | None = None


class BadSegment(Exception):
    def __init__(self, name: str, value: str, rule: str) -> None:
        super().__init__(f"{name} {value!r} is invalid: {rule}")


def _name(kind: str, value: str) -> str:
    if not _NAME.fullmatch(value) or ".." in value:
        raise BadSegment(kind, value, "expected a Kubernetes name (lowercase letters, digits, '-' and '.')")
    return value


def _revision(kind: str, value: str) -> str:
    if not _REVISION.fullmatch(value) or ".." in value:
        rule = "expected a commit or tree id (letters, digits, '.', '_' and '-'; not starting with '-' or '.')"
        raise BadSegment(kind, value, rule)
    return value


def _error(status: int, message: str, **extra: Any) -> JSONResponse:
    return JSONResponse({"error": message, **extra}, status_code=status)


def raw_path_problem(raw_path: bytes) -> str | None:
    """Why a request path is refused before routing, else None. The server decodes %2F into '/' before
    routing (the request would then reach another route or none), so encoded separators and dot segments are
    caught here, on the raw path."""
    for segment in raw_path.split(b"?", 1)[0].split(b"/"):
        decoded = unquote_to_bytes(segment)
        if b"/" in decoded or b"\\" in decoded or b"\x00" in decoded:
            return f"path segment {segment.decode('latin-1')!r} is invalid: it may not contain '/', '\\' or NUL"
        if decoded in (b".", b".."):
            return f"path segment {segment.decode('latin-1')!r} is invalid: '.' and '..' are not names"
        if _CONTROL.search(decoded):
            # Routes match with a regex whose `$` also matches before a final newline: `…/plan%0A` would
            # otherwise reach `…/plan`. No name, revision or route segment holds a control character.
            return f"path segment {segment.decode('latin-1')!r} is invalid: it may not contain a control character"
    return None


class _RawPathGuard:
    """Plain ASGI (not BaseHTTPMiddleware) so request bodies keep streaming untouched."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            problem = raw_path_problem(scope.get("raw_path") or scope["path"].encode())
            if problem is not None:
                await _error(400, problem)(scope, receive, send)
                return
        await self.app(scope, receive, send)


Segment = Annotated[str, PathParam(min_length=1, max_length=253)]
Attempt = Annotated[int, PathParam(ge=0, le=1_000_000)]
Format = Annotated[PlanFormat, Query(description="Which rendering of the plan.")]


def server_options(settings: DatastoreSettings) -> dict[str, Any]:
    """uvicorn.Config options every datastore listener (HTTP and HTTPS) is started with: the slow-client timers."""
    from burrito_py.datastore.admission import guarded_protocol  # uvicorn's protocol: only where a server runs

    return {"http": guarded_protocol(settings.header_timeout_seconds, settings.read_timeout_seconds,
                                     settings.write_timeout_seconds)}


def read_cache_for(storage: Storage, settings: DatastoreSettings) -> Storage:
    """`storage` behind the read cache the settings describe (as it is when they turn it off)."""
    return with_read_cache(storage, settings.read_cache_max_bytes, settings.read_cache_max_object_bytes,
                           settings.read_cache_ttl_seconds)


def default_authenticator(settings: DatastoreSettings) -> Authenticator:
    """TokenReviews through the Kubernetes API named by the settings, behind a short cache."""
    from burrito_py.datastore.kube_auth import KubeAuthenticator
    from burrito_py.datastore.review_throttle import ReviewThrottle
    from burrito_py.datastore.token_cache import CachedAuthenticator

    reviewer = KubeAuthenticator(
        settings.auth_audiences,
        settings.auth_admin_users,
        settings.auth_admin_groups,
        settings.kubeconfig,
        settings.auth_runner_service_account,
        settings.auth_runner_pull_request_service_account,
        allow_cross_namespace_repositories=settings.auth_allow_cross_namespace_repositories,
    )
    cached = CachedAuthenticator(reviewer, settings.auth_cache_ttl_seconds, settings.auth_negative_cache_ttl_seconds)
    return ThrottledAuthenticator(cached, ReviewThrottle(settings.auth_review_burst, settings.auth_reviews_per_minute))


_bearer = HTTPBearer(
    auto_error=False,
    description="A Kubernetes service-account token with audience burrito-py (checked by a TokenReview).",
)


async def _caller(
    request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
) -> Principal:
    token = credentials.credentials if credentials else proxied_token(request.headers.get(PROXIED_AUTHORIZATION))
    return await _principal(request.app.state.authenticator, token, request.client.host if request.client else "")


class _FromAddress:
    """A throttled authenticator asked for one client address (the Authenticator protocol has no address)."""

    def __init__(self, throttled: ThrottledAuthenticator, address: str) -> None:
        self.throttled, self.address = throttled, address

    async def authenticate(self, token: str) -> Principal:
        return await self.throttled.authenticate(token, self.address)


async def _principal(authenticator: Authenticator | None, token: str | None, address: str = "") -> Principal:
    if isinstance(authenticator, ThrottledAuthenticator):
        authenticator = _FromAddress(authenticator, address)
    try:
        return await principal_of(authenticator, token)
    except Throttled as exc:
        raise AuthError(429, str(exc), exc.retry_after) from None
    except AuthError as exc:
        if exc.status == 503:
            log.warning("cannot check a datastore token: %s", exc)
        raise


def _bearer_token(authorization: str | None, proxied: str | None) -> str | None:
    """The token `_caller` gets from these headers: HTTPBearer's reading of `Authorization` (no error when it is
    absent or another scheme), else the proxied header's."""
    scheme, credentials = get_authorization_scheme_param(authorization)
    if authorization and scheme and credentials and scheme.lower() == "bearer":
        return credentials
    return proxied_token(proxied)


def _auth_answer(exc: AuthError) -> JSONResponse:
    response = _error(exc.status, str(exc))
    if exc.status == 401:
        response.headers["WWW-Authenticate"] = 'Bearer realm="burrito-py-datastore"'
    if exc.retry_after is not None:
        response.headers["Retry-After"] = str(exc.retry_after)
    return response


def _encryption_answer(path: str, exc: EncryptionError) -> JSONResponse:
    # A key that is not configured or an object that fails authentication: one clear line, no traceback (the
    # message names the object and key id, never key material).
    log.error("cannot serve %s: %s", path, exc)
    return _error(500, str(exc))


# The GETs users wait on (the plan review, the approval page, `plan download`, logs): a run's latest plan, one
# attempt's plan, one attempt's log. Attempt numbers in canonical form only, so FastAPI's reading of any other
# spelling (and its error) stays FastAPI's.
_HOT_PATH = re.compile(
    r"/api/v1/layers/([^/]{1,253})/([^/]{1,253})/runs/([^/]{1,253})/(?:plan|attempts/(0|[1-9][0-9]{0,6})/(plan|logs))"
)
_HOT_QUERY: dict[bytes, PlanFormat] = {
    b"": "json", **{f"format={name}".encode(): name for name in get_args(PlanFormat)}
}
HotRead = Callable[[Principal, str, str, str, int | None, str, PlanFormat], Awaitable[Response]]


class _HotReads:
    """The hot GETs answered by the routes' own functions without FastAPI's routing and dependency resolution
    (issue 31: about a tenth of such a GET's time): the same token reading, authentication, authorization,
    validation and answers, errors included. A request of any other shape (another query, a non-canonical attempt
    number, a segment FastAPI would refuse by its length) goes the usual way. Inside the admission and raw-path
    middleware, like every route."""

    def __init__(self, app: ASGIApp, read: list[HotRead]) -> None:
        self.app, self.read = app, read  # `read`: filled by create_app once the routes' functions exist

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "GET" and not scope.get("root_path") and self.read:
            match = _HOT_PATH.fullmatch(scope["path"])
            query = scope.get("query_string", b"")
            fmt = _HOT_QUERY.get(query) if match is not None and (match[5] != "logs" or not query) else None
            if match is not None and fmt is not None and int(match[4] or 0) <= 1_000_000:
                headers = Headers(scope=scope)
                try:
                    client = scope.get("client")
                    who = await _principal(scope["app"].state.authenticator,
                                           _bearer_token(headers.get("authorization"),
                                                         headers.get(PROXIED_AUTHORIZATION)),
                                           client[0] if client else "")
                    n = int(match[4]) if match[4] is not None else None
                    response = await self.read[0](who, match[1], match[2], match[3], n, match[5] or "", fmt)
                except AuthError as exc:
                    response = _auth_answer(exc)
                except BadSegment as exc:
                    response = _error(400, str(exc))
                except EncryptionError as exc:
                    response = _encryption_answer(scope["path"], exc)
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


Caller = Annotated[Principal, Depends(_caller)]


def basic_password(header: str | None) -> str | None:
    """The password of an `Authorization: Basic` header, else None: Terraform's http backend sends only basic
    auth (`TF_HTTP_USERNAME`, `TF_HTTP_PASSWORD`), and the runner puts its datastore token in the password."""
    scheme, _, encoded = (header or "").partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(encoded.strip(), validate=True).decode("utf-8")
    except (binascii.Error, ValueError):
        return None
    return decoded.partition(":")[2] or None


async def _state_caller(
    request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
) -> Principal:
    """As `_caller`, and basic auth (the password being the token): the state backend's routes (Terraform's http
    backend) and the tool mirror's tenv layout (tenv), whose clients send no other credentials."""
    if credentials is None and (password := basic_password(request.headers.get("authorization"))) is not None:
        return await _caller(request, HTTPAuthorizationCredentials(scheme="Bearer", credentials=password))
    return await _caller(request, credentials)


def create_app(
    storage: Storage, settings: DatastoreSettings | None = None, authenticator: Authenticator | None = None,
    metrics_gate: MetricsGate | None = None,
) -> FastAPI:
    """`authenticator` replaces the TokenReview one built from `settings` (when auth is enabled), `metrics_gate` the
    one guarding /metrics."""
    settings = settings or DatastoreSettings()
    if not isinstance(storage, CachedStorage):  # `datastore start` wraps it itself, for retention to share
        storage = read_cache_for(storage, settings)
    if settings.auth_enabled and authenticator is None:
        authenticator = default_authenticator(settings)
    elif not settings.auth_enabled:
        authenticator = None
    app = FastAPI(title="burrito-py datastore", version="v1")
    app.state.authenticator = authenticator
    hot_read: list[HotRead] = []
    app.add_middleware(_HotReads, read=hot_read)  # innermost: after admission and the raw path's checks
    app.add_middleware(_RawPathGuard)
    # Outermost (after FastAPI's own error handling): a shed request costs no routing and no token review.
    from burrito_py.datastore.admission import Admission

    app.add_middleware(Admission, max_active=settings.max_active_requests, max_queued=settings.max_queued_requests,
                       queue_seconds=settings.queue_timeout_seconds)
    api = APIRouter(prefix="/api/v1")

    @app.exception_handler(BadSegment)
    async def bad_segment(_: Request, exc: BadSegment) -> JSONResponse:
        return _error(400, str(exc))

    @app.exception_handler(EncryptionError)
    async def encryption_error(request: Request, exc: EncryptionError) -> JSONResponse:
        return _encryption_answer(request.url.path, exc)

    @app.exception_handler(ClientDisconnect)
    async def client_went_away(request: Request, _: ClientDisconnect) -> Response:
        # An upload cut off (by its client, or by the read timeout, §10.7): storage already dropped what it got. One
        # line, no traceback; the answer reaches nobody.
        log.info("%s %s: the client went away before its body was complete; nothing stored", request.method,
                 request.url.path)
        return Response(status_code=400)

    @app.exception_handler(AuthError)
    async def auth_error(_: Request, exc: AuthError) -> JSONResponse:
        return _auth_answer(exc)

    def allow(who: Principal, action: Action, target: Target) -> None:
        denied = authorize(who, action, target)
        if denied is not None:
            log.info("datastore denied %s %s of %s: %s", who.username, action, target.describe(), denied)
            raise AuthError(403, denied)

    usage = NamespaceUsage(storage, settings.quota_recount_seconds)

    def sha_headers(info: ObjectInfo | Stored) -> dict[str, str]:
        return {SHA_HEADER: info.sha256}

    async def store(key: str, request: Request, limit: int | None = None, *, once: bool = False,
                    limit_reason: str | None = None, namespace: str | None = None) -> Response:
        """Stream the body into `key` (at most `limit` bytes; `limit_reason` names that limit in the 413).
        `once`: a write-once object (runners): the same bytes again are 200, other bytes 409."""
        limit = limit or settings.max_body_bytes
        reason = limit_reason or f"the body may hold at most {describe_bytes(limit)}"
        declared = request.headers.get("content-length", "")
        name = key.rsplit("/", 1)[-1]
        if limit <= 0 or (declared.isdigit() and int(declared) > limit):
            # Refused before a byte is read: the body never reaches storage.
            return _error(413, f"{name} refused: {reason}", limit=max(limit, 0))
        claimed = request.headers.get(SHA_HEADER)
        expected = None
        if claimed is not None:
            # The client's sum of the body it sends (DatastoreClient sends it with Content-Length): checked, and on
            # S3 recorded before the body is in, so a large body is uploaded once instead of staged and copied.
            if not _SHA256.fullmatch(claimed) or not declared.isdigit():
                return _error(400, f"header {SHA_HEADER} is invalid: expected 64 lowercase hex digits (the body's "
                                   "SHA-256), sent with Content-Length")
            expected = ObjectInfo(claimed, int(declared))
        try:
            stored = await storage.put(key, request.stream(), limit, once=once, expected=expected)
        except TooLarge:
            return _error(413, f"{name} refused: {reason}", limit=limit)
        except Mismatch as exc:
            return _error(400, f"{name} refused: {exc}; nothing was stored")
        except Exists as exc:
            return _error(409, f"{name} of this attempt is already stored with other content (sha256 "
                               f"{exc.sha256}): an attempt's objects are written once")
        if namespace is not None and stored.created:
            usage.add(namespace, stored.size)
        body = {"key": key, "size": stored.size, "sha256": stored.sha256}
        return JSONResponse(body, status_code=201 if stored.created else 200, headers=sha_headers(stored))

    async def serve(key: str, media_type: str, missing: str) -> Response:
        opened = await storage.read(key)
        if opened is None:
            return _error(404, missing)
        headers = {**sha_headers(opened.info), "Content-Length": str(opened.info.size)}
        if isinstance(opened, Held):  # in memory already: one body, without a streaming response's task group
            return Response(opened.data, media_type=media_type, headers=headers)
        return StreamingResponse(opened.stream, media_type=media_type, headers=headers)

    async def describe_head(key: str, media_type: str) -> Response:
        info = await storage.stat(key)
        if info is None:
            return Response(status_code=404)
        return Response(status_code=200, media_type=media_type,
                        headers={**sha_headers(info), "Content-Length": str(info.size)})

    def run_prefix(ns: str, layer: str, run: str) -> str:
        return f"layers/{_name('namespace', ns)}/{_name('layer', layer)}/{_name('run', run)}"

    def attempt_prefix(who: Principal, action: Action, ns: str, layer: str, run: str, attempt: int | None = None
                       ) -> str:
        prefix = run_prefix(ns, layer, run)
        allow(who, action, LayerArtifacts(ns, layer, run, attempt))
        return prefix

    async def put_attempt_object(who: Principal, ns: str, layer: str, run: str, n: int, filename: str,
                                 request: Request, limit: int, setting: str) -> Response:
        """One object of an attempt. A runner (its own run and attempt only: auth.py) writes it once, within the
        format's limit and its run's and namespace's quotas; the controllers may write anything again."""
        prefix = attempt_prefix(who, "write", ns, layer, run, n)
        runner = not who.admin
        run_bytes = await run_used(storage, prefix) if runner and settings.run_quota_bytes else None
        ns_bytes = await usage.used(ns) if runner and settings.namespace_quota_bytes else None
        granted = allowance(filename, limit, setting, run, run_bytes, settings.run_quota_bytes, ns, ns_bytes,
                            settings.namespace_quota_bytes)
        return await store(f"{prefix}/{n}/{filename}", request, granted.limit, once=runner,
                           limit_reason=granted.reason, namespace=ns)

    responses: dict[int | str, dict[str, Any]] = {
        400: {"description": "A path segment or parameter is invalid."},
        401: {"description": "No bearer token, or one the Kubernetes API rejects."},
        403: {"description": "The caller may not touch this layer or repository."},
        503: {"description": "The token cannot be checked now (Kubernetes API unavailable)."},
    }
    written: dict[int | str, dict[str, Any]] = {
        **responses,
        200: {"description": "The same bytes were already stored (a retried write-once upload)."},
        409: {"description": "A runner's object of this attempt is already stored with other bytes."},
        413: {"description": "Body above the format's limit, or above the run's or namespace's quota."},
    }
    found: dict[int | str, dict[str, Any]] = {**responses, 404: {}}
    plan_limits = {
        "bin": (settings.max_plan_bytes, "BURRITO_PY_DATASTORE_MAX_PLAN_BYTES"),
        "json": (settings.max_plan_json_bytes, "BURRITO_PY_DATASTORE_MAX_PLAN_JSON_BYTES"),
        "pretty": (settings.max_plan_text_bytes, "BURRITO_PY_DATASTORE_MAX_PLAN_TEXT_BYTES"),
        "short": (SHORT_LIMIT, "fixed"),
    }

    @api.put("/layers/{ns}/{layer}/runs/{run}/attempts/{n}/plan", status_code=201, responses=written)
    async def put_plan(
        who: Caller, ns: Segment, layer: Segment, run: Segment, n: Attempt, request: Request, format: Format = "bin"
    ) -> Response:
        limit, setting = plan_limits[format]
        return await put_attempt_object(who, ns, layer, run, n, PLAN_FILES[format][0], request, limit, setting)

    @api.get("/layers/{ns}/{layer}/runs/{run}/attempts/{n}/plan", responses=found)
    async def get_plan(
        who: Caller, ns: Segment, layer: Segment, run: Segment, n: Attempt, format: Format = "json"
    ) -> Response:
        return await read_plan(who, ns, layer, run, n, format)

    async def read_plan(who: Principal, ns: str, layer: str, run: str, n: int, format: PlanFormat) -> Response:
        filename, media = PLAN_FILES[format]
        return await serve(
            f"{attempt_prefix(who, 'read', ns, layer, run)}/{n}/{filename}",
            media,
            f"no plan for {ns}/{layer} run {run} attempt {n} (format {format})",
        )

    @api.head("/layers/{ns}/{layer}/runs/{run}/attempts/{n}/plan", responses=found)
    async def head_plan(
        who: Caller, ns: Segment, layer: Segment, run: Segment, n: Attempt, format: Format = "json"
    ) -> Response:
        filename, media = PLAN_FILES[format]
        return await describe_head(f"{attempt_prefix(who, 'read', ns, layer, run)}/{n}/{filename}", media)

    async def latest_attempt(prefix: str, filename: str) -> int | None:
        """The highest attempt number under a run's prefix that holds `filename`."""
        numbers = [
            int(parts[-2])
            for key in await storage.list(prefix)
            if (parts := key.split("/"))[-1] == filename and parts[-2].isdigit()
        ]
        return max(numbers, default=None)

    @api.get("/layers/{ns}/{layer}/runs/{run}/plan", responses=found)
    async def get_latest_plan(
        who: Caller, ns: Segment, layer: Segment, run: Segment, format: Format = "json"
    ) -> Response:
        return await read_latest_plan(who, ns, layer, run, format)

    async def read_latest_plan(who: Principal, ns: str, layer: str, run: str, format: PlanFormat) -> Response:
        prefix = attempt_prefix(who, "read", ns, layer, run)
        filename, media = PLAN_FILES[format]
        latest = await latest_attempt(prefix, filename)
        if latest is None:
            return _error(404, f"no plan for {ns}/{layer} run {run} (format {format})")
        return await serve(f"{prefix}/{latest}/{filename}", media, "plan vanished")

    @api.put("/layers/{ns}/{layer}/runs/{run}/attempts/{n}/logs", status_code=201, responses=written)
    async def put_logs(
        who: Caller, ns: Segment, layer: Segment, run: Segment, n: Attempt, request: Request
    ) -> Response:
        return await put_attempt_object(who, ns, layer, run, n, LOG_FILE, request, settings.max_log_bytes,
                                        "BURRITO_PY_DATASTORE_MAX_LOG_BYTES")

    @api.get("/layers/{ns}/{layer}/runs/{run}/attempts/{n}/logs", responses=found)
    async def get_logs(who: Caller, ns: Segment, layer: Segment, run: Segment, n: Attempt) -> Response:
        return await read_logs(who, ns, layer, run, n)

    async def read_logs(who: Principal, ns: str, layer: str, run: str, n: int) -> Response:
        return await serve(
            f"{attempt_prefix(who, 'read', ns, layer, run)}/{n}/{LOG_FILE}",
            TEXT,
            f"no logs for {ns}/{layer} run {run} attempt {n}",
        )

    async def hot(who: Principal, ns: str, layer: str, run: str, n: int | None, kind: str, format: PlanFormat
                  ) -> Response:
        """One of the hot GETs (`_HotReads`): kind "" the latest plan, else an attempt's plan or log."""
        if n is None:
            return await read_latest_plan(who, ns, layer, run, format)
        if kind == "plan":
            return await read_plan(who, ns, layer, run, n, format)
        return await read_logs(who, ns, layer, run, n)

    hot_read.append(hot)

    @api.head("/layers/{ns}/{layer}/runs/{run}/attempts/{n}/logs", responses=found)
    async def head_logs(who: Caller, ns: Segment, layer: Segment, run: Segment, n: Attempt) -> Response:
        return await describe_head(f"{attempt_prefix(who, 'read', ns, layer, run)}/{n}/{LOG_FILE}", TEXT)

    @api.put("/layers/{ns}/{layer}/runs/{run}/attempts/{n}/outputs", status_code=201, responses=written)
    async def put_outputs(
        who: Caller, ns: Segment, layer: Segment, run: Segment, n: Attempt, request: Request
    ) -> Response:
        return await put_attempt_object(who, ns, layer, run, n, OUTPUTS_FILE, request, settings.max_outputs_bytes,
                                        "BURRITO_PY_DATASTORE_MAX_OUTPUTS_BYTES")

    @api.get("/layers/{ns}/{layer}/runs/{run}/attempts/{n}/outputs", responses=found)
    async def get_outputs(who: Caller, ns: Segment, layer: Segment, run: Segment, n: Attempt) -> Response:
        return await serve(
            f"{attempt_prefix(who, 'read', ns, layer, run)}/{n}/{OUTPUTS_FILE}",
            "application/json",
            f"no outputs for {ns}/{layer} run {run} attempt {n}",
        )

    @api.head("/layers/{ns}/{layer}/runs/{run}/attempts/{n}/outputs", responses=found)
    async def head_outputs(who: Caller, ns: Segment, layer: Segment, run: Segment, n: Attempt) -> Response:
        return await describe_head(f"{attempt_prefix(who, 'read', ns, layer, run)}/{n}/{OUTPUTS_FILE}",
                                   "application/json")

    # An attempt's record that its apply completed, stored right after the apply: a retry of the run that finds
    # it does not apply the same plan again, and the run controller records the apply on the layer from it
    # when the attempt failed after applying (docs/architecture.md §6.4, §9).
    @api.put("/layers/{ns}/{layer}/runs/{run}/attempts/{n}/applied", status_code=201, responses=written)
    async def put_applied(
        who: Caller, ns: Segment, layer: Segment, run: Segment, n: Attempt, request: Request
    ) -> Response:
        # A small JSON record: 4 KiB is plenty, and keeps this route from being a general upload.
        return await put_attempt_object(who, ns, layer, run, n, APPLIED_FILE, request, APPLIED_LIMIT, "fixed")

    @api.get("/layers/{ns}/{layer}/runs/{run}/attempts/{n}/applied", responses=found)
    async def get_attempt_applied(who: Caller, ns: Segment, layer: Segment, run: Segment, n: Attempt) -> Response:
        return await serve(f"{attempt_prefix(who, 'read', ns, layer, run)}/{n}/{APPLIED_FILE}", "application/json",
                           f"no applied record for {ns}/{layer} run {run} attempt {n}")

    @api.get("/layers/{ns}/{layer}/runs/{run}/applied", responses=found)
    async def get_applied(who: Caller, ns: Segment, layer: Segment, run: Segment) -> Response:
        """The latest attempt's applied record of a run (what `put_applied` stored), 404 when none has one."""
        prefix = attempt_prefix(who, "read", ns, layer, run)
        latest = await latest_attempt(prefix, APPLIED_FILE)
        if latest is None:
            return _error(404, f"no applied record for {ns}/{layer} run {run}")
        return await serve(f"{prefix}/{latest}/{APPLIED_FILE}", "application/json", "applied record vanished")

    # The controllers' review of an attempt's plan (policy verdict, drift), keyed by the plan's sum inside. A
    # runner may read it but never write it (auth.py, "review").
    @api.put("/layers/{ns}/{layer}/runs/{run}/attempts/{n}/review", status_code=201, responses=written)
    async def put_review(
        who: Caller, ns: Segment, layer: Segment, run: Segment, n: Attempt, request: Request
    ) -> Response:
        prefix = attempt_prefix(who, "read", ns, layer, run)
        allow(who, "review", LayerArtifacts(ns, layer, run, n))
        return await store(f"{prefix}/{n}/{REVIEW_FILE}", request, REVIEW_LIMIT, namespace=ns)

    @api.get("/layers/{ns}/{layer}/runs/{run}/attempts/{n}/review", responses=found)
    async def get_review(who: Caller, ns: Segment, layer: Segment, run: Segment, n: Attempt) -> Response:
        return await serve(
            f"{attempt_prefix(who, 'read', ns, layer, run)}/{n}/{REVIEW_FILE}",
            "application/json",
            f"no review for {ns}/{layer} run {run} attempt {n}",
        )

    # What a run is given (docs/architecture.md §5.11, §9): its variables (the values of spec.varsFrom, which the
    # controllers resolve, and the upstream outputs of spec.dependsOn), which of them are sensitive and which came
    # from a Secret. Written by the controllers before they create the run, read by that run's runner only
    # (Secret values: auth.py, "read-inputs"). A runner never writes it (auth.py, "inputs").
    @api.put("/layers/{ns}/{layer}/runs/{run}/inputs", status_code=201, responses=written)
    async def put_inputs(who: Caller, ns: Segment, layer: Segment, run: Segment, request: Request) -> Response:
        prefix = attempt_prefix(who, "read", ns, layer, run)
        allow(who, "inputs", LayerArtifacts(ns, layer, run))
        return await store(f"{prefix}/{INPUTS_FILE}", request, INPUTS_LIMIT, namespace=ns)

    @api.get("/layers/{ns}/{layer}/runs/{run}/inputs", responses=found)
    async def get_inputs(who: Caller, ns: Segment, layer: Segment, run: Segment) -> Response:
        return await serve(
            f"{attempt_prefix(who, 'read-inputs', ns, layer, run)}/{INPUTS_FILE}",
            "application/json",
            f"no inputs for {ns}/{layer} run {run}",
        )

    # Everything one run stored (every attempt's plans, logs, outputs, applied record and review, and its inputs):
    # the controllers throw away a closed pull request's plan runs. Only admins (auth.py, "delete"); 204 whether
    # or not anything was there, so a retried delete succeeds. Nothing is read, so nothing is decrypted.
    @api.delete(
        "/layers/{ns}/{layer}/runs/{run}",
        status_code=204,
        responses={
            **responses,
            503: {"description": "The token cannot be checked now, or some objects could not be deleted (retry)."},
        },
    )
    async def delete_run(who: Caller, ns: Segment, layer: Segment, run: Segment) -> Response:
        stored = await storage.sizes(attempt_prefix(who, "delete", ns, layer, run))
        try:
            await storage.delete_many(stored)
        except DeleteFailed as exc:
            log.warning("cannot delete %s/%s run %s: %s", ns, layer, run, exc)
            return _error(503, f"deletion of {ns}/{layer} run {run} is incomplete, retry: {exc}")
        usage.add(ns, -sum(stored.values()))
        if stored:
            log.info("%s deleted %d object(s) of %s/%s run %s", who.username, len(stored), ns, layer, run)
        return Response(status_code=204)

    def sources(who: Principal, action: Action, ns: str, repo: str) -> str:
        prefix = f"sources/{_name('namespace', ns)}/{_name('repository', repo)}"
        allow(who, action, Sources(ns, repo))
        return prefix

    async def tree_of(prefix: str, revision: str) -> str | None:
        stream = await storage.open(f"{prefix}/revisions/{_revision('revision', revision)}")
        if stream is None:
            return None
        return b"".join([chunk async for chunk in stream]).decode().strip() or None

    @api.head("/repositories/{ns}/{repo}/trees/{tree}", responses={**responses, 404: {}})
    async def has_tree(who: Caller, ns: Segment, repo: Segment, tree: Segment) -> Response:
        found = await storage.exists(f"{sources(who, 'read', ns, repo)}/{_revision('tree', tree)}.tar.gz")
        return Response(status_code=200 if found else 404)

    @api.put(
        "/repositories/{ns}/{repo}/revisions/{revision}/source",
        status_code=201,
        responses={**responses, 404: {"description": "Linking to a tree that is not stored."}, 413: {}},
    )
    async def put_source(
        who: Caller,
        ns: Segment,
        repo: Segment,
        revision: Segment,
        request: Request,
        tree: Annotated[str, Header(alias=TREE_HEADER)],
    ) -> Response:
        prefix, tree = sources(who, "write", ns, repo), _revision("tree", tree)
        _revision("revision", revision)
        archive = f"{prefix}/{tree}.tar.gz"
        if request.headers.get("content-length", "0") == "0" and "transfer-encoding" not in request.headers:
            if not await storage.exists(archive):
                return _error(404, f"tree {tree} of {ns}/{repo} is not stored; send the archive")
        elif not await storage.exists(archive):  # content-addressed: identical trees are stored once
            response = await store(archive, request)
            if response.status_code != 201:
                return response
        await storage.put(f"{prefix}/revisions/{revision}", _once(tree.encode()), 1024)
        return JSONResponse({"revision": revision, "tree": tree}, status_code=201)

    @api.get("/repositories/{ns}/{repo}/revisions/{revision}/source", responses={**responses, 404: {}})
    async def get_source(who: Caller, ns: Segment, repo: Segment, revision: Segment) -> Response:
        prefix = sources(who, "read", ns, repo)
        tree = await tree_of(prefix, revision)
        if tree is None:
            return _error(404, f"no source archive for {ns}/{repo} at {revision}")
        return await serve(f"{prefix}/{tree}.tar.gz", "application/gzip", "source archive vanished")

    @api.head("/repositories/{ns}/{repo}/revisions/{revision}/source", responses={**responses, 404: {}})
    async def head_source(who: Caller, ns: Segment, repo: Segment, revision: Segment) -> Response:
        prefix = sources(who, "read", ns, repo)
        tree = await tree_of(prefix, revision)
        found = tree is not None and await storage.exists(f"{prefix}/{tree}.tar.gz")
        return Response(status_code=200 if found else 404)

    @app.get("/healthz")
    @api.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    app.include_router(api)
    from burrito_py.datastore.state_routes import state_router

    app.include_router(state_router(storage, _state_caller, allow, _name, settings.max_state_bytes,
                                    settings.state_versions_kept, usage=usage,
                                    namespace_quota=settings.namespace_quota_bytes))
    _mount_caches(app, storage, settings)

    # /metrics: for who may `get` the non-resource URL /metrics (kube/metrics_auth.py), not for every runner pod.
    # Imported here, never in the handler: the Kubernetes client's import takes seconds on a loaded machine, and
    # in the handler it would hold the event loop, and every request with it, for that long.
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    gate = None
    if settings.auth_enabled:
        from burrito_py.kube.metrics_auth import MetricsGate, MetricsRefused

        gate = metrics_gate or MetricsGate.for_kubeconfig(str(settings.kubeconfig) if settings.kubeconfig else None)

    @app.get("/metrics", include_in_schema=False)
    async def metrics(request: Request) -> Response:
        if gate is not None:
            try:
                await gate.check(request.headers.get("authorization"))
            except MetricsRefused as exc:
                return _error(exc.status, str(exc))
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)
    return app


async def _once(data: bytes) -> AsyncIterator[bytes]:
    yield data


def _mount_caches(app: FastAPI, storage: Storage, settings: DatastoreSettings) -> None:
    """The provider mirror and the tool cache (docs/architecture.md §10.5), when enabled."""
    if not (settings.provider_cache_enabled or settings.tool_cache_enabled):
        return
    from burrito_py.datastore.providercache.cache import ProviderCache
    from burrito_py.datastore.providercache.pins import LockPins
    from burrito_py.datastore.providercache.routes import mirror_router
    from burrito_py.datastore.providercache.tools import ToolCache
    from burrito_py.datastore.providercache.upstream import Upstream, ssl_context

    upstream = Upstream(ssl_context(settings.upstream_ca_file), registry_urls=settings.provider_cache_registry_urls)
    ttl = settings.provider_cache_index_ttl_seconds
    registries = [*settings.provider_cache_registries, *settings.provider_cache_registry_urls]
    providers = ProviderCache(storage, upstream, registries, ttl,
                              settings.provider_cache_max_bytes, LockPins(storage)) \
        if settings.provider_cache_enabled else None
    tools = ToolCache(storage, upstream, settings.tool_cache_terraform_url, settings.tool_cache_opentofu_url,
                      settings.tool_cache_opentofu_index_url, ttl, terragrunt_url=settings.tool_cache_terragrunt_url,
                      terragrunt_index_url=settings.tool_cache_terragrunt_index_url,
                      max_bytes=settings.tool_cache_max_bytes) \
        if settings.tool_cache_enabled else None
    from burrito_py.datastore.providercache.signing import ArchiveSigner, UrlKeys

    key = settings.provider_cache_url_key.get_secret_value().encode() if settings.provider_cache_url_key else None
    signer = ArchiveSigner(UrlKeys(key, settings.tls_key_file), settings.provider_cache_url_ttl_seconds)
    app.include_router(mirror_router(providers, tools, _caller, signer, basic_caller=_state_caller))
