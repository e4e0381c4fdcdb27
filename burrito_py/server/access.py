"""Who may read or act on what, as the caller: one module for the REST API, the UI's pages, actions and event
streams (docs/architecture.md §11.2, §11.4).

The server reads and writes with its own rights, so it must first ask whether the *caller* could: a
SubjectAccessReview with the identity the TokenReview gave (user, groups, uid and extra; `kube/subject.py` says
why all four) or the trusted proxy's user and groups, for the verb and resource of what is read or done, in the
namespace of the object — the same question kube-apiserver would ask for `kubectl get` or `kubectl annotate`.
What maps to what is `Permission` below.

Answers are cached `CACHE_SECONDS` (10 s), allowed and denied alike, keyed by that identity, verb, resource and
namespace; a review that fails ("cannot check") is never cached and becomes a 503. Actions ask afresh
(`fresh=True`). Concurrent identical questions share one review. A RoleBinding removed therefore takes effect
within 10 s for reads (and at once for actions); an event stream re-asks while it runs.

Runner identities (any token of the runner ServiceAccount, bound to a pod or not) are refused everything: RBAC
lets a runner `get` its namespace's runs, which would otherwise open every other layer's plans of that namespace
to tenant code.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import aiohttp

from burrito_py.api import annotations as ann
from burrito_py.datastore.auth import AUTH_DISABLED, Principal
from burrito_py.kube.client import Kube, KubeError
from burrito_py.kube.subject import Extra, review_subject

REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
# Short: a RoleBinding removed takes effect on reads within this long (actions and stream re-checks ask again).
CACHE_SECONDS = 10.0
MAX_ENTRIES = 20_000  # many users times namespaces times permissions: bounded, the oldest go first
CONCURRENT_REVIEWS = 16  # a first look at a list across many namespaces asks in parallel, but not all at once
SERVICE_ACCOUNT_PREFIX = "system:serviceaccount:"
RUNNER_SERVICE_ACCOUNT = "burrito-py-runner"


@dataclass(frozen=True, slots=True)
class User:
    username: str
    groups: tuple[str, ...]
    uid: str = ""
    extra: Extra = ()  # part of the cache key: two tokens of one user with other scopes are other questions


@dataclass(frozen=True, slots=True)
class Permission:
    """A verb on a resource, asked in a namespace ("" for every namespace)."""

    verb: str
    resource: str
    group: str = ann.GROUP

    def describe(self, namespace: str) -> str:
        where = f"in the namespace {namespace}" if namespace else "at the cluster scope"
        return f"{self.verb} {self.resource} {where}"


# What each read and action needs (docs/architecture.md §11.2 has the table).
GET_LAYERS = Permission("get", "terraformlayers")
LIST_LAYERS = Permission("list", "terraformlayers")
PATCH_LAYERS = Permission("patch", "terraformlayers")  # sync, approve, override: what `kubectl annotate` needs
GET_RUNS = Permission("get", "terraformruns")  # runs, attempts, logs, masked plans
LIST_RUNS = Permission("list", "terraformruns")
LIST_PULL_REQUESTS = Permission("list", "terraformpullrequests")
GET_REPOSITORIES = Permission("get", "terraformrepositories")
# The raw plan JSON holds every Secret-fed variable and the whole prior state: the right that already shows
# those values.
GET_SECRETS = Permission("get", "secrets", "")


class AccessUnavailable(Exception):
    """The Kubernetes API could not answer a SubjectAccessReview (503; never cached)."""


class Forbidden(Exception):
    """403: the message names the caller and the permission it lacks (never whether the object exists)."""


def is_runner(principal: Principal, runner_service_account: str, *others: str) -> bool:
    """A token bound to a runner pod, or any token of the runners' service accounts (in any namespace)."""
    if principal.runner is not None:
        return True
    if not principal.username.startswith(SERVICE_ACCOUNT_PREFIX):
        return False
    _, _, account = principal.username.removeprefix(SERVICE_ACCOUNT_PREFIX).partition(":")
    return account == runner_service_account or account in others


@dataclass(slots=True)
class ReviewStats:
    hits: int = 0
    misses: int = 0

    @property
    def hit_rate(self) -> float:
        total = self.hits + self.misses
        return self.hits / total if total else 0.0


class AccessReviewer:
    """SubjectAccessReviews with a short cache (see the module's docstring)."""

    def __init__(self, kube: Kube, cache_seconds: float = CACHE_SECONDS, max_entries: int = MAX_ENTRIES,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.kube, self.cache_seconds, self.max_entries, self.clock = kube, cache_seconds, max_entries, clock
        self.stats = ReviewStats()
        self._cache: dict[tuple[User, Permission, str], tuple[float, bool]] = {}
        self._pending: dict[tuple[User, Permission, str], asyncio.Future[bool]] = {}
        self._slots = asyncio.Semaphore(CONCURRENT_REVIEWS)

    async def allowed(self, user: User, permission: Permission, namespace: str, *, fresh: bool = False) -> bool:
        """`fresh`: ask the API even when a recent answer is cached (before acting). Raises AccessUnavailable."""
        key, now = (user, permission, namespace), self.clock()
        cached = self._cache.get(key)
        if cached is not None and not fresh and now - cached[0] < self.cache_seconds:
            self.stats.hits += 1
            return cached[1]
        self.stats.misses += 1
        pending = self._pending.get(key)
        if pending is None or fresh:
            # A task of its own: a client that goes away must not cancel the review others wait for.
            pending = asyncio.ensure_future(self._review(key))
            if not fresh:
                self._pending[key] = pending
                pending.add_done_callback(lambda done: self._finished(key, done))
        return await asyncio.shield(pending)

    def _finished(self, key: tuple[User, Permission, str], done: asyncio.Future[bool]) -> None:
        if self._pending.get(key) is done:
            del self._pending[key]
        if not done.cancelled():
            done.exception()  # retrieved, in case every waiter went away

    async def _review(self, key: tuple[User, Permission, str]) -> bool:
        user, permission, namespace = key
        attributes = {"verb": permission.verb, "group": permission.group, "resource": permission.resource}
        if namespace:
            attributes["namespace"] = namespace
        review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                  "spec": {**review_subject(user.username, user.groups, user.uid, user.extra),
                           "resourceAttributes": attributes}}
        async with self._slots:
            started = self.clock()
            try:
                answer = await self.kube.create(REVIEWS, review)
            except KubeError as exc:
                raise AccessUnavailable(f"the Kubernetes API answered the SubjectAccessReview with {exc.status} "
                                        f"{exc.reason}") from None
            except (OSError, TimeoutError, aiohttp.ClientError) as exc:
                raise AccessUnavailable(f"the Kubernetes API is unreachable: {type(exc).__name__}") from None
        allowed = bool((answer.get("status") or {}).get("allowed"))
        self._store(key, started, allowed)
        return allowed

    def _store(self, key: tuple[User, Permission, str], when: float, allowed: bool) -> None:
        if len(self._cache) >= self.max_entries:
            now = self.clock()
            for stale in [k for k, (at, _) in self._cache.items() if now - at >= self.cache_seconds]:
                del self._cache[stale]
            while len(self._cache) >= self.max_entries:
                del self._cache[next(iter(self._cache))]
        self._cache.pop(key, None)
        self._cache[key] = (when, allowed)


class Access:
    """The decision the REST API and the UI share: may this principal do that in this namespace?"""

    def __init__(self, reviewer: AccessReviewer, runner_service_account: str = RUNNER_SERVICE_ACCOUNT,
                 pull_request_service_account: str = "burrito-py-runner-pr") -> None:
        self.reviewer, self.runner_service_account = reviewer, runner_service_account
        self.pull_request_service_account = pull_request_service_account

    def refusal_of_identity(self, who: Principal) -> str | None:
        """Why this identity may use nothing at all (a runner), else None."""
        if who is not AUTH_DISABLED and is_runner(who, self.runner_service_account,
                                                         self.pull_request_service_account):
            return (f"{who.describe()} is a runner; runner identities may not use the server's REST API or UI "
                    "(their own artifacts are in the datastore)")
        return None

    async def allowed(self, who: Principal, permission: Permission, namespace: str, *, fresh: bool = False) -> bool:
        if who is AUTH_DISABLED:
            return True  # auth off: local tests only
        if self.refusal_of_identity(who) is not None:
            return False
        user = User(who.username, who.groups, who.uid, who.extra)
        return await self.reviewer.allowed(user, permission, namespace, fresh=fresh)

    async def require(self, who: Principal, permission: Permission, *namespaces: str, fresh: bool = False) -> None:
        """Raise Forbidden unless allowed in every namespace given (a run read in its own namespace and in the one
        its artifacts live in, say). Always asked before reading the object: a 403 says nothing of existence."""
        refusal = self.refusal_of_identity(who)
        if refusal is not None:
            raise Forbidden(refusal)
        for namespace in dict.fromkeys(namespaces):
            if not await self.allowed(who, permission, namespace, fresh=fresh):
                raise Forbidden(f"{who.describe()} may not {permission.describe(namespace)}")

    async def namespaces_allowed(self, who: Principal, permission: Permission, namespaces: Iterable[str]) -> set[str]:
        """The namespaces among `namespaces` where `who` has `permission`: one cluster-scope question first (a
        cluster-wide grant answers for all), then one per namespace, from the cache when recent."""
        wanted = set(namespaces)
        if not wanted or who is AUTH_DISABLED:
            return wanted
        if self.refusal_of_identity(who) is not None:
            return set()
        if await self.allowed(who, permission, ""):
            return wanted
        ordered = sorted(wanted)
        answers = await asyncio.gather(*(self.allowed(who, permission, ns) for ns in ordered))
        return {ns for ns, ok in zip(ordered, answers, strict=True) if ok}
