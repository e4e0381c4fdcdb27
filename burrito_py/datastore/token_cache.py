"""A short-lived cache in front of an Authenticator, so a busy runner costs one TokenReview per TTL.

Keys are token digests (never tokens). Accepted tokens are kept `ttl` seconds but never past their own
expiry; rejected ones `negative_ttl` seconds (a burst of bad requests costs one review, and a token that
was just created still gets in quickly). "Cannot check" is never cached. Concurrent requests with the same
uncached token share one review.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

from burrito_py.datastore.auth import Authenticator, Principal, Unauthenticated, unverified_expiry
from burrito_py.kube.tokens import token_digest


@dataclass(frozen=True, slots=True)
class _Entry:
    expires: float
    principal: Principal | None  # None: rejected
    reason: str


class CachedAuthenticator:
    def __init__(
        self,
        inner: Authenticator,
        ttl: float = 30.0,
        negative_ttl: float = 5.0,
        max_entries: int = 10_000,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._inner = inner
        self._ttl, self._negative_ttl, self._max = ttl, negative_ttl, max_entries
        self._clock = clock
        self._entries: dict[str, _Entry] = {}
        self._pending: dict[str, asyncio.Future[_Entry]] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def knows(self, token: str) -> bool:
        """Whether `token` is answered from the cache now (accepted or rejected), without a review."""
        entry = self._entries.get(token_digest(token))
        return entry is not None and entry.expires > self._clock()

    def reviewing(self, token: str) -> bool:
        """Whether a review of `token` is in flight (a request with it now joins that review, costing none)."""
        return token_digest(token) in self._pending

    async def authenticate(self, token: str) -> Principal:
        key = token_digest(token)
        entry = self._entries.get(key)
        if entry is None or entry.expires <= self._clock():
            review = self._pending.get(key)
            if review is None:
                # A task of its own: a client that disconnects must not cancel the review others wait on.
                review = asyncio.ensure_future(self._review(key, token))
                self._pending[key] = review
                review.add_done_callback(lambda done: self._finished(key, done))
            entry = await asyncio.shield(review)
        if entry.principal is None:
            raise Unauthenticated(entry.reason)
        return entry.principal

    def _finished(self, key: str, review: asyncio.Future[_Entry]) -> None:
        self._pending.pop(key, None)
        if not review.cancelled():
            review.exception()  # retrieved here too, in case every waiter went away

    async def _review(self, key: str, token: str) -> _Entry:
        now = self._clock()
        try:
            principal = await self._inner.authenticate(token)
        except Unauthenticated as exc:
            entry = _Entry(now + self._negative_ttl, None, str(exc))
        else:
            lifetime = self._ttl
            expiry = unverified_expiry(token)
            if expiry is not None:
                lifetime = min(lifetime, expiry - now)
            entry = _Entry(now + lifetime, principal, "")
        self._store(key, entry, now)
        return entry

    def _store(self, key: str, entry: _Entry, now: float) -> None:
        if entry.expires <= now:
            return
        if len(self._entries) >= self._max:
            for stale in [k for k, e in self._entries.items() if e.expires <= now]:
                del self._entries[stale]
            while len(self._entries) >= self._max:  # still full: drop the oldest insertions
                del self._entries[next(iter(self._entries))]
        self._entries.pop(key, None)
        self._entries[key] = entry
