"""Throttled token reviews (docs/architecture.md §10.2, §11.2, §11.4): each bearer token the server or the datastore
has not reviewed recently costs a TokenReview on the Kubernetes API, so a flood of made-up tokens (at the UI's login
form, in a session cookie, as a REST bearer token, from tenant code in a runner pod at the datastore) would be a
flood of reviews.

Two token buckets, taken before every review the cache cannot answer and given back when the token is accepted
(or the review could not be made), so people who log in and browse never spend them:

- per client address: `ADDRESS_BURST` reviews at once, refilled at `ADDRESS_PER_MINUTE` a minute;
- per token digest (SHA-256; never the token): `TOKEN_BURST`, refilled at `TOKEN_PER_MINUTE` a minute.

An empty bucket is a 429 with `Retry-After` (whole seconds until it holds one again), and no review. The client
address is the connection's peer, or what a trusted proxy forwards (`forwarded_allow_ips`): behind an Ingress
without that setting every client shares the ingress controller's budget. Buckets are per process.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from burrito_py.datastore.auth import AuthUnavailable, Principal, Unauthenticated
from burrito_py.datastore.token_cache import CachedAuthenticator
from burrito_py.kube.tokens import token_digest

ADDRESS_BURST, ADDRESS_PER_MINUTE = 20, 20.0
TOKEN_BURST, TOKEN_PER_MINUTE = 5, 5.0
MAX_KEYS = 50_000  # buckets kept at most; full buckets are forgotten first


class Throttled(Exception):
    """429: too many token reviews from this address or for this token."""

    def __init__(self, retry_after: int, message: str) -> None:
        super().__init__(message)
        self.retry_after = retry_after


@dataclass(slots=True)
class _Bucket:
    level: float
    at: float


class Buckets:
    """Token buckets by key: `burst` tokens, refilled at `per_minute`."""

    def __init__(self, burst: int, per_minute: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.burst, self.rate, self.clock = burst, per_minute / 60.0, clock
        self._buckets: dict[str, _Bucket] = {}

    def _bucket(self, key: str) -> _Bucket:
        now = self.clock()
        bucket = self._buckets.get(key)
        if bucket is None:
            if len(self._buckets) >= MAX_KEYS:
                self._forget_full(now)
            bucket = self._buckets[key] = _Bucket(float(self.burst), now)
        else:
            bucket.level = min(float(self.burst), bucket.level + (now - bucket.at) * self.rate)
            bucket.at = now
        return bucket

    def _forget_full(self, now: float) -> None:
        for key in [k for k, b in self._buckets.items() if b.level + (now - b.at) * self.rate >= self.burst]:
            del self._buckets[key]
        while len(self._buckets) >= MAX_KEYS:
            del self._buckets[next(iter(self._buckets))]

    def wait(self, key: str) -> float:
        """Seconds until `key` holds a token (0: it holds one now)."""
        bucket = self._bucket(key)
        return 0.0 if bucket.level >= 1 else (1 - bucket.level) / self.rate

    def take(self, key: str) -> None:
        self._bucket(key).level -= 1

    def give_back(self, key: str) -> None:
        bucket = self._bucket(key)
        bucket.level = min(float(self.burst), bucket.level + 1)


class ReviewThrottle:
    def __init__(self, address_burst: int = ADDRESS_BURST, address_per_minute: float = ADDRESS_PER_MINUTE,
                 token_burst: int = TOKEN_BURST, token_per_minute: float = TOKEN_PER_MINUTE,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.addresses = Buckets(address_burst, address_per_minute, clock)
        self.tokens = Buckets(token_burst, token_per_minute, clock)

    def take(self, address: str, digest: str) -> None:
        """Spend one review from both buckets, or raise Throttled (spending nothing)."""
        waits = {"from this address": self.addresses.wait(address), "with this token": self.tokens.wait(digest)}
        worst = max(waits, key=lambda k: waits[k])
        if waits[worst] > 0:
            retry = max(1, math.ceil(waits[worst]))
            raise Throttled(retry, f"too many token reviews {worst}: retry in {retry} s")
        self.addresses.take(address)
        self.tokens.take(digest)

    def give_back(self, address: str, digest: str) -> None:
        self.addresses.give_back(address)
        self.tokens.give_back(digest)


class ThrottledAuthenticator:
    """A CachedAuthenticator whose reviews (not its cache hits) are throttled per client address and token."""

    def __init__(self, cached: CachedAuthenticator, throttle: ReviewThrottle) -> None:
        self.cached, self.throttle = cached, throttle

    async def authenticate(self, token: str, address: str = "") -> Principal:
        if self.cached.knows(token) or self.cached.reviewing(token):
            # Answered from the cache, or by the review already under way (concurrent first requests): no review.
            return await self.cached.authenticate(token)
        digest = token_digest(token)
        self.throttle.take(address, digest)
        try:
            principal = await self.cached.authenticate(token)
        except Unauthenticated:
            raise  # a made-up token keeps its cost
        except AuthUnavailable:
            self.throttle.give_back(address, digest)
            raise
        self.throttle.give_back(address, digest)
        return principal
