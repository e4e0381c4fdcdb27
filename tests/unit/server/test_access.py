"""The server's authorizer (server/access.py), token-review throttle (datastore/review_throttle.py) and
event-stream bounds (server/ui/streams.py), with a stand-in for the API's answers (the integration tests use the
emulator's RBAC)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from burrito_py.datastore.auth import AUTH_DISABLED, Principal, RunnerScope, Unauthenticated
from burrito_py.datastore.review_throttle import ReviewThrottle, Throttled, ThrottledAuthenticator
from burrito_py.datastore.token_cache import CachedAuthenticator
from burrito_py.kube.client import KubeError
from burrito_py.server.access import (
    GET_RUNS,
    LIST_LAYERS,
    Access,
    AccessReviewer,
    AccessUnavailable,
    Forbidden,
    User,
    is_runner,
)
from burrito_py.server.ui.streams import StreamLimits, TooManyStreams, bounded


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Reviews:
    """Answers SubjectAccessReviews from a set of (user, verb, resource, namespace) allowed."""

    def __init__(self, allowed: set[tuple[str, str, str, str]]) -> None:
        self.allowed, self.asked, self.fail = allowed, list[dict[str, Any]](), False

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        assert path == "/apis/authorization.k8s.io/v1/subjectaccessreviews"
        self.asked.append(body)
        if self.fail:
            raise KubeError(500, "Internal Server Error", "boom")
        attrs = body["spec"]["resourceAttributes"]
        key = (body["spec"]["user"], attrs["verb"], attrs["resource"], attrs.get("namespace", ""))
        return {"status": {"allowed": key in self.allowed}}


ALICE = Principal("alice", groups=("team-a",))
RUNNER = Principal("system:serviceaccount:team-a:burrito-py-runner")


def access(reviews: Reviews, clock: Clock | None = None) -> Access:
    return Access(AccessReviewer(reviews, clock=clock or Clock()), "burrito-py-runner")  # type: ignore[arg-type]


def test_runner_identities_are_refused_pod_bound_or_not() -> None:
    assert is_runner(RUNNER, "burrito-py-runner")
    assert is_runner(Principal("system:serviceaccount:team-b:burrito-py-runner"), "burrito-py-runner")
    assert is_runner(Principal("x", runner=RunnerScope("a", "b", "c", "a", "r", 1)), "burrito-py-runner")
    assert not is_runner(ALICE, "burrito-py-runner")
    reviews = Reviews({(RUNNER.username, "get", "terraformruns", "team-a")})
    with pytest.raises(Forbidden, match="is a runner"):
        asyncio.run(access(reviews).require(RUNNER, GET_RUNS, "team-a"))
    assert reviews.asked == []  # refused before any review


def test_answers_are_cached_allowed_and_denied_and_actions_ask_afresh() -> None:
    clock, reviews = Clock(), Reviews({("alice", "get", "terraformruns", "team-a")})
    decide = access(reviews, clock)

    async def scenario() -> None:
        assert await decide.allowed(ALICE, GET_RUNS, "team-a")
        assert not await decide.allowed(ALICE, GET_RUNS, "team-b")
        assert await decide.allowed(ALICE, GET_RUNS, "team-a") and not await decide.allowed(ALICE, GET_RUNS, "team-b")
        assert len(reviews.asked) == 2
        await decide.allowed(ALICE, GET_RUNS, "team-a", fresh=True)
        assert len(reviews.asked) == 3
        clock.now += 10.0  # the TTL
        reviews.allowed.clear()
        assert not await decide.allowed(ALICE, GET_RUNS, "team-a")
        assert decide.reviewer.stats.hits == 2 and decide.reviewer.stats.misses == 4

    asyncio.run(scenario())
    assert reviews.asked[0]["spec"]["groups"] == ["team-a"]


def test_cannot_check_is_never_cached() -> None:
    reviews = Reviews({("alice", "get", "terraformruns", "team-a")})
    reviews.fail = True
    decide = access(reviews)

    async def scenario() -> None:
        with pytest.raises(AccessUnavailable):
            await decide.allowed(ALICE, GET_RUNS, "team-a")
        reviews.fail = False
        assert await decide.allowed(ALICE, GET_RUNS, "team-a")

    asyncio.run(scenario())


def test_concurrent_identical_questions_share_one_review() -> None:
    reviews = Reviews(set())
    decide = access(reviews)

    async def scenario() -> None:
        await asyncio.gather(*(decide.allowed(ALICE, GET_RUNS, "team-a") for _ in range(20)))

    asyncio.run(scenario())
    assert len(reviews.asked) == 1


def test_namespaces_allowed_asks_cluster_wide_first() -> None:
    reviews = Reviews({("alice", "list", "terraformlayers", "team-a"), ("bob", "list", "terraformlayers", "")})
    decide = access(reviews)
    spaces = {"team-a", "team-b", "team-c"}
    assert asyncio.run(decide.namespaces_allowed(ALICE, LIST_LAYERS, spaces)) == {"team-a"}
    assert asyncio.run(decide.namespaces_allowed(Principal("bob"), LIST_LAYERS, spaces)) == spaces
    assert asyncio.run(decide.namespaces_allowed(RUNNER, LIST_LAYERS, spaces)) == set()
    assert asyncio.run(decide.namespaces_allowed(AUTH_DISABLED, LIST_LAYERS, spaces)) == spaces


def test_the_cache_is_bounded() -> None:
    reviewer = AccessReviewer(Reviews(set()), max_entries=10)  # type: ignore[arg-type]

    async def scenario() -> None:
        for i in range(50):
            await reviewer.allowed(User(f"u{i}", ()), GET_RUNS, "ns")

    asyncio.run(scenario())
    assert len(reviewer._cache) <= 10


SCOPES = "scopes.authorization.openshift.io"


class ScopedReviews(Reviews):
    """An authorizer that honours a token's scopes, which travel in the user's `extra` (OpenShift's scoped tokens):
    a token scoped to `user:info` may read nothing, whatever its user may."""

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        scopes = (body["spec"].get("extra") or {}).get(SCOPES)
        if scopes is not None and "user:full" not in scopes:
            self.asked.append(body)
            return {"status": {"allowed": False, "reason": f"scopes {scopes} do not allow it"}}
        return await super().create(path, body)


def test_attack_a_token_limited_by_its_scopes_gets_no_more_than_they_allow() -> None:
    """Before, the review named only user and groups: a token scoped to `user:info` read what its user may read,
    and a full token's allowed answer was cached for the scoped one too (same user, same groups)."""
    reviews = ScopedReviews({("alice", "get", "terraformruns", "team-a")})
    decide = access(reviews)
    full = Principal("alice", groups=("team-a",), uid="u-1", extra=((SCOPES, ("user:full",)),))
    scoped = Principal("alice", groups=("team-a",), uid="u-1", extra=((SCOPES, ("user:info",)),))

    async def scenario() -> tuple[bool, bool]:
        return await decide.allowed(full, GET_RUNS, "team-a"), await decide.allowed(scoped, GET_RUNS, "team-a")

    assert asyncio.run(scenario()) == (True, False)
    assert reviews.asked[-1]["spec"]["uid"] == "u-1"
    assert reviews.asked[-1]["spec"]["extra"] == {SCOPES: ["user:info"]}
    # A principal without uid or extra (the trusted proxy's) sends neither field.
    asyncio.run(decide.allowed(ALICE, GET_RUNS, "team-a"))
    assert "uid" not in reviews.asked[-1]["spec"] and "extra" not in reviews.asked[-1]["spec"]


# -- throttle -----------------------------------------------------------------------------------------------------
class Tokens:
    """Accepts "good-*" tokens; counts reviews."""

    def __init__(self) -> None:
        self.reviews = 0

    async def authenticate(self, token: str) -> Principal:
        self.reviews += 1
        if token.startswith("good"):
            return Principal(token)
        raise Unauthenticated("rejected")


def test_made_up_tokens_from_one_address_are_throttled_with_retry_after() -> None:
    clock, inner = Clock(), Tokens()
    auth = ThrottledAuthenticator(CachedAuthenticator(inner, 30, 5, clock=clock), ReviewThrottle(clock=clock))

    async def scenario() -> list[str]:
        outcomes = []
        for i in range(25):
            try:
                await auth.authenticate(f"bad-{i}", "10.0.0.1")
                outcomes.append("ok")
            except Unauthenticated:
                outcomes.append("401")
            except Throttled as exc:
                outcomes.append(f"429:{exc.retry_after}")
        return outcomes

    outcomes = asyncio.run(scenario())
    assert outcomes[:20] == ["401"] * 20 and outcomes[20:] == ["429:3"] * 5  # 20 a minute: one per 3 s
    assert inner.reviews == 20
    # Another address is not affected; accepted tokens give their place back.
    assert asyncio.run(auth.authenticate("good-1", "10.0.0.2")).username == "good-1"
    clock.now += 3
    assert asyncio.run(auth.authenticate("good-2", "10.0.0.1")).username == "good-2"
    assert asyncio.run(auth.authenticate("good-3", "10.0.0.1")).username == "good-3"  # given back


def test_one_token_is_reviewed_at_most_five_times_a_minute_from_any_address() -> None:
    clock, inner = Clock(), Tokens()
    auth = ThrottledAuthenticator(CachedAuthenticator(inner, 30, 5, clock=clock), ReviewThrottle(clock=clock))

    async def scenario() -> int:
        throttled = 0
        for i in range(20):
            clock.now += 6  # past the negative cache each time
            try:
                await auth.authenticate("bad-same", f"10.0.1.{i}")
            except Unauthenticated:
                pass
            except Throttled:
                throttled += 1
        return throttled

    throttled = asyncio.run(scenario())
    # 120 s: a burst of 5, then one every 12 s.
    assert inner.reviews <= 5 + 120 / 12 and throttled >= 5


def test_a_cached_token_is_never_throttled() -> None:
    clock, inner = Clock(), Tokens()
    auth = ThrottledAuthenticator(CachedAuthenticator(inner, 30, 5, clock=clock),
                                  ReviewThrottle(address_burst=1, address_per_minute=1, clock=clock))
    asyncio.run(auth.authenticate("good-known", "10.0.0.1"))
    with pytest.raises(Unauthenticated):
        asyncio.run(auth.authenticate("bad", "10.0.0.1"))
    with pytest.raises(Throttled):
        asyncio.run(auth.authenticate("bad-2", "10.0.0.1"))
    assert asyncio.run(auth.authenticate("good-known", "10.0.0.1")).username == "good-known"


# -- streams -------------------------------------------------------------------------------------------------------
def test_stream_limits_per_user_and_in_total() -> None:
    limits = StreamLimits(total=3, per_user=2)
    a1, _ = limits.acquire("a"), limits.acquire("a")
    with pytest.raises(TooManyStreams, match="a already has 2"):
        limits.acquire("a")
    limits.acquire("b")
    with pytest.raises(TooManyStreams, match="already serves 3"):
        limits.acquire("c")
    a1()
    a1()  # releasing twice counts once
    assert limits.open == 2
    limits.acquire("c")


async def _forever() -> AsyncIterator[str]:
    while True:
        await asyncio.sleep(3600)
        yield "never"


def test_a_silent_stream_is_rechecked_and_ends_when_access_goes() -> None:
    checks: list[bool] = []

    async def still_allowed() -> bool:
        checks.append(True)
        return len(checks) < 3

    async def scenario() -> list[str]:
        return [chunk async for chunk in bounded(_forever(), lifetime=60, recheck_seconds=0.05,
                                                 still_allowed=still_allowed)]

    assert asyncio.run(asyncio.wait_for(scenario(), 5)) == []
    assert len(checks) == 3


def test_a_stream_ends_at_its_lifetime() -> None:
    async def ticks() -> AsyncIterator[str]:
        while True:
            await asyncio.sleep(0.01)
            yield "tick"

    async def allowed() -> bool:
        return True

    async def scenario() -> int:
        return len([c async for c in bounded(ticks(), lifetime=0.2, recheck_seconds=10, still_allowed=allowed)])

    count = asyncio.run(asyncio.wait_for(scenario(), 5))
    assert 5 < count < 40
