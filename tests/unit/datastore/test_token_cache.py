"""The review cache in front of the TokenReview authenticator, with a fake reviewer and a fake clock."""

from __future__ import annotations

import asyncio
import base64
import json

import pytest

from burrito_py.datastore.auth import AuthUnavailable, Principal, Unauthenticated
from burrito_py.datastore.token_cache import CachedAuthenticator

GOOD = Principal("system:serviceaccount:team:burrito-py-runner")


class Reviewer:
    """Accepts tokens starting with 'good', rejects others, fails while `down`."""

    def __init__(self) -> None:
        self.reviews: list[str] = []
        self.down = False
        self.delay = 0.0

    async def authenticate(self, token: str) -> Principal:
        self.reviews.append(token)
        await asyncio.sleep(self.delay)
        if self.down:
            raise AuthUnavailable("API unreachable")
        if not token.startswith("good"):
            raise Unauthenticated("invalid bearer token")
        return GOOD


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def _cache(reviewer: Reviewer, clock: Clock, **kw: float) -> CachedAuthenticator:
    return CachedAuthenticator(reviewer, ttl=30, negative_ttl=5, clock=clock, **kw)  # type: ignore[arg-type]


def test_accepted_tokens_are_reviewed_once_per_ttl():
    reviewer, clock = Reviewer(), Clock()
    cache = _cache(reviewer, clock)

    async def scenario() -> None:
        assert await cache.authenticate("good-1") is GOOD
        clock.now += 29
        assert await cache.authenticate("good-1") is GOOD
        assert reviewer.reviews == ["good-1"]
        clock.now += 2
        await cache.authenticate("good-1")
        assert reviewer.reviews == ["good-1", "good-1"]

    asyncio.run(scenario())


def test_rejections_are_cached_briefly_and_keep_their_reason():
    reviewer, clock = Reviewer(), Clock()
    cache = _cache(reviewer, clock)

    async def scenario() -> None:
        for _ in range(3):
            with pytest.raises(Unauthenticated, match="invalid bearer token"):
                await cache.authenticate("bad")
        assert len(reviewer.reviews) == 1
        clock.now += 6
        with pytest.raises(Unauthenticated):
            await cache.authenticate("bad")
        assert len(reviewer.reviews) == 2

    asyncio.run(scenario())


def test_a_token_is_never_cached_past_its_own_expiry():
    reviewer, clock = Reviewer(), Clock()
    cache = _cache(reviewer, clock)
    body = base64.urlsafe_b64encode(json.dumps({"exp": clock.now + 3}).encode()).rstrip(b"=").decode()
    token = f"good.{body}.sig"

    async def scenario() -> None:
        await cache.authenticate(token)
        clock.now += 2
        await cache.authenticate(token)
        assert len(reviewer.reviews) == 1
        clock.now += 2  # past exp, well within the 30 s TTL: reviewed again (and the API says expired)
        await cache.authenticate(token)
        assert len(reviewer.reviews) == 2

    asyncio.run(scenario())


def test_unavailable_is_not_cached():
    reviewer, clock = Reviewer(), Clock()
    cache = _cache(reviewer, clock)
    reviewer.down = True

    async def scenario() -> None:
        with pytest.raises(AuthUnavailable):
            await cache.authenticate("good-1")
        reviewer.down = False
        assert await cache.authenticate("good-1") is GOOD
        assert len(reviewer.reviews) == 2

    asyncio.run(scenario())


def test_concurrent_requests_share_one_review_even_if_the_first_caller_goes_away():
    reviewer, clock = Reviewer(), Clock()
    reviewer.delay = 0.05
    cache = _cache(reviewer, clock)

    async def scenario() -> None:
        first = asyncio.create_task(cache.authenticate("good-1"))
        await asyncio.sleep(0)
        others = [asyncio.create_task(cache.authenticate("good-1")) for _ in range(10)]
        await asyncio.sleep(0.01)
        first.cancel()
        assert await asyncio.gather(*others) == [GOOD] * 10
        assert reviewer.reviews == ["good-1"]

    asyncio.run(scenario())


def test_the_cache_is_bounded_and_holds_no_token():
    reviewer, clock = Reviewer(), Clock()
    cache = _cache(reviewer, clock, max_entries=3)

    async def scenario() -> None:
        for i in range(10):
            await cache.authenticate(f"good-{i}")
        assert len(cache) == 3
        assert not any(f"good-{i}" in key for key in cache._entries for i in range(10))

    asyncio.run(scenario())
