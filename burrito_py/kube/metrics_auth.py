"""Who may read a component's `/metrics` (docs/architecture.md §14, "Metrics"): as kube-apiserver's own `/metrics`
and controller-runtime's metrics filter ask, a bearer token the Kubernetes API accepts (a TokenReview for the API's
own audience, which a Prometheus pod's service-account token has) whose user may `get` the non-resource URL
`/metrics` (a SubjectAccessReview; the chart's ClusterRole `<release>-metrics-reader` grants it). Without that, the
metrics (namespaces, layer counts by state, provider cache traffic) were anyone's on the network, runner pods
(tenant code) included.

Answers are cached per token digest: allowed `ALLOWED_SECONDS` (30 s), refused `REFUSED_SECONDS` (5 s); "cannot
check" is never cached (503).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import aiohttp

from burrito_py.kube.client import Kube, KubeError
from burrito_py.kube.subject import frozen_extra, review_subject
from burrito_py.kube.tokens import token_digest

log = logging.getLogger(__name__)
TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"  # noqa: S105 - an API path
ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
METRICS_PATH = "/metrics"
ALLOWED_SECONDS, REFUSED_SECONDS = 30.0, 5.0
MAX_ENTRIES = 1_000


class MetricsRefused(Exception):
    """401 (no or a rejected token), 403 (may not get /metrics) or 503 (cannot check now)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True, slots=True)
class _Answer:
    until: float
    refusal: MetricsRefused | None


def bearer(authorization: str | None) -> str | None:
    scheme, _, token = (authorization or "").partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else None


class MetricsGate:
    def __init__(self, kube: Callable[[], Awaitable[Kube]], clock: Callable[[], float] = time.monotonic) -> None:
        """`kube`: how to reach the API (called once, in the loop that serves the metrics)."""
        self._connect, self.clock = kube, clock
        self._kube: Kube | None = None
        self._answers: dict[str, _Answer] = {}
        self._lock = asyncio.Lock()

    @classmethod
    def for_kubeconfig(cls, kubeconfig: str | None) -> MetricsGate:
        return cls(lambda: Kube.connect(kubeconfig))

    async def _api(self) -> Kube:
        async with self._lock:
            if self._kube is None:
                self._kube = await self._connect()
            kube: Kube = self._kube
            return kube

    async def close(self) -> None:
        if self._kube is not None:
            await self._kube.close()

    async def check(self, authorization: str | None) -> None:
        """Return when the caller may read the metrics; raise MetricsRefused otherwise."""
        token = bearer(authorization)
        if token is None:
            raise MetricsRefused(401, "send 'Authorization: Bearer <token>' of a user who may get /metrics")
        key, now = token_digest(token), self.clock()
        answer = self._answers.get(key)
        if answer is None or answer.until <= now:
            refusal = await self._review(token)
            if len(self._answers) >= MAX_ENTRIES:
                self._answers.clear()
            self._answers[key] = _Answer(now + (ALLOWED_SECONDS if refusal is None else REFUSED_SECONDS), refusal)
            answer = self._answers[key]
        if answer.refusal is not None:
            raise answer.refusal

    async def _review(self, token: str) -> MetricsRefused | None:
        try:
            kube = await self._api()
            review = await kube.create(TOKEN_REVIEWS, {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                                                       "spec": {"token": token}})
            status = review.get("status") or {}
            user = status.get("user") or {}
            if not status.get("authenticated") or not user.get("username"):
                return MetricsRefused(401, "the Kubernetes API did not accept the bearer token")
            access = await kube.create(ACCESS_REVIEWS, {
                "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                "spec": {**review_subject(user["username"], user.get("groups") or (), str(user.get("uid") or ""),
                                          frozen_extra(user.get("extra"))),
                         "nonResourceAttributes": {"path": METRICS_PATH, "verb": "get"}}})
        except (KubeError, OSError, TimeoutError, aiohttp.ClientError) as exc:
            # Only the status: nothing that could echo the token.
            log.warning("metrics: cannot review a token: %s", getattr(exc, "status", type(exc).__name__))
            raise MetricsRefused(503, "cannot check the token now") from None
        if not (access.get("status") or {}).get("allowed"):
            return MetricsRefused(403, f"{user['username']} may not get {METRICS_PATH}")
        return None


def serve_metrics(port: int, host: str, gate: Callable[[], MetricsGate] | None) -> None:
    """Serve the process's Prometheus registry at `/metrics` on host:port from a thread of its own (it outlives
    any operator restarted in the process), behind `gate()` unless None. Returns once listening."""
    import threading

    from aiohttp import web
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    listening, failure = threading.Event(), list[BaseException]()

    async def main() -> None:
        guard = gate() if gate is not None else None

        async def metrics(request: web.Request) -> web.Response:
            if guard is not None:
                try:
                    await guard.check(request.headers.get("Authorization"))
                except MetricsRefused as exc:
                    return web.json_response({"error": str(exc)}, status=exc.status)
            return web.Response(body=generate_latest(), headers={"Content-Type": CONTENT_TYPE_LATEST})

        app = web.Application()
        app.router.add_get(METRICS_PATH, metrics)
        runner = web.AppRunner(app, handle_signals=False, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, host, port).start()
        listening.set()
        await asyncio.Event().wait()  # for the life of the process (a daemon thread)

    def run() -> None:
        try:
            asyncio.run(main())
        except BaseException as exc:  # reported to the starting thread
            failure.append(exc)
            listening.set()

    threading.Thread(target=run, name="burrito-py-metrics", daemon=True).start()
    listening.wait(30)
    if failure:
        raise RuntimeError(f"cannot serve metrics on {host}:{port}: {failure[0]}") from failure[0]
