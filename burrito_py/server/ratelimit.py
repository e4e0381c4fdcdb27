"""How many webhook deliveries a source may have refused before it is answered 429 (docs/architecture.md §11.1).

A token bucket per source address: every delivery that is not acted on (malformed, too large, unknown repository,
wrong signature, a duplicate) takes a token; a source without a token left is answered 429 before its body is
read; tokens come back at `per_minute`. A provider's verified deliveries take none, so an attacker sharing no
address with it never slows it. IPv6 sources count per /64 (one host usually holds a whole /64). Behind a proxy
named in the server's `forwarded_allow_ips`, uvicorn gives the rightmost X-Forwarded-For address that is not one of
those proxies (a client can prepend anything, never append); otherwise the source is the peer's address.
"""

from __future__ import annotations

import ipaddress
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["SourceLimiter", "source_of"]


def source_of(peer: str | None) -> str:
    """The source a delivery is counted against: the client's address (uvicorn has already taken it from
    X-Forwarded-For when the peer is one of the server's `forwarded_allow_ips`), or its /64 for IPv6."""
    try:
        address = ipaddress.ip_address((peer or "").strip("[]"))
    except ValueError:
        return peer or "unknown"
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.IPv6Network((address, 64), strict=False))
    return str(address)


@dataclass(slots=True)
class _Bucket:
    tokens: float
    at: float


VOUCHED_SECONDS = 3600.0  # how long a verified delivery exempts its source from the throttle


class SourceLimiter:
    """Buckets of `burst` tokens refilled at `per_minute`; at most `max_sources` remembered (the least recently
    seen go first: a forgotten source starts full, which only ever favours it). `per_minute` 0: no limit.

    A source that delivered a verified delivery within `vouched_seconds` (`vouch`) is never throttled: it is a
    provider's address, and anyone can have a provider send refused deliveries from it (a webhook of their own
    repository pointing here, pinged in a loop; a self-hosted GitLab or Gitea sends every project's hooks from one
    address), which would otherwise hold back every tenant's genuine deliveries from that address."""

    def __init__(self, per_minute: float, burst: int, max_sources: int = 100_000,
                 now: Callable[[], float] = time.monotonic, vouched_seconds: float = VOUCHED_SECONDS) -> None:
        self.rate, self.burst, self.max_sources, self.now = per_minute / 60.0, max(1, burst), max_sources, now
        self.vouched_seconds = vouched_seconds
        self._buckets: OrderedDict[str, _Bucket] = OrderedDict()
        self._vouched: OrderedDict[str, float] = OrderedDict()  # source → when it last delivered a verified one

    def vouch(self, source: str) -> None:
        """`source` delivered a verified delivery now."""
        self._vouched[source] = self.now()
        self._vouched.move_to_end(source)
        while len(self._vouched) > self.max_sources:
            self._vouched.popitem(last=False)

    def _is_vouched(self, source: str) -> bool:
        at = self._vouched.get(source)
        return at is not None and self.now() - at <= self.vouched_seconds

    def _bucket(self, source: str) -> _Bucket:
        now = self.now()
        bucket = self._buckets.get(source)
        if bucket is None:
            bucket = self._buckets[source] = _Bucket(float(self.burst), now)
            while len(self._buckets) > self.max_sources:
                self._buckets.popitem(last=False)
        else:
            bucket.tokens = min(float(self.burst), bucket.tokens + (now - bucket.at) * self.rate)
            bucket.at = now
            self._buckets.move_to_end(source)
        return bucket

    def retry_after(self, source: str) -> float | None:
        """None when the source may be heard; else the seconds until it may."""
        if self.rate <= 0 or self._is_vouched(source):
            return None
        bucket = self._bucket(source)
        return None if bucket.tokens >= 1.0 else (1.0 - bucket.tokens) / self.rate

    def charge(self, source: str) -> None:
        """One delivery of `source` was not acted on."""
        if self.rate > 0 and not self._is_vouched(source):
            bucket = self._bucket(source)
            bucket.tokens = max(0.0, bucket.tokens - 1.0)
