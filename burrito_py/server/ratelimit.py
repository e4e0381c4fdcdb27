"""How many webhook deliveries a source may have refused before it is answered 429 (docs/architecture.md §11.1).

A token bucket per source address: every delivery that is not acted on (malformed, too large, unknown repository,
wrong signature, a duplicate) takes a token; a source without a token left is answered 429 before its body is
read; tokens come back at `per_minute`. A provider's verified deliveries take none, so an attacker sharing no
address with it never slows it. IPv6 sources count per /64 (one host usually holds a whole /64). Behind a proxy,
the source is the rightmost X-Forwarded-For address that is not one of the `trusted` proxies (a client can prepend
anything, never append); without `trusted`, the peer's address.
"""

from __future__ import annotations

import ipaddress
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

__all__ = ["SourceLimiter", "source_of"]

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text.strip().strip("[]"))
    except ValueError:
        return None


def source_of(peer: str | None, forwarded_for: str | None, trusted: Sequence[Network]) -> str:
    """The source a delivery is counted against: an address, or its /64 for IPv6."""
    address = _address(peer or "")
    if address is not None and forwarded_for and any(address in net for net in trusted):
        for hop in reversed(forwarded_for.split(",")):
            candidate = _address(hop)
            if candidate is None:
                break  # garbage: count the last trusted hop rather than believe what comes before it
            address = candidate
            if not any(candidate in net for net in trusted):
                break
    if address is None:
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


class SourceLimiter:
    """Buckets of `burst` tokens refilled at `per_minute`; at most `max_sources` remembered (the least recently
    seen go first: a forgotten source starts full, which only ever favours it). `per_minute` 0: no limit."""

    def __init__(self, per_minute: float, burst: int, max_sources: int = 100_000,
                 now: Callable[[], float] = time.monotonic) -> None:
        self.rate, self.burst, self.max_sources, self.now = per_minute / 60.0, max(1, burst), max_sources, now
        self._buckets: OrderedDict[str, _Bucket] = OrderedDict()

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
        if self.rate <= 0:
            return None
        bucket = self._bucket(source)
        return None if bucket.tokens >= 1.0 else (1.0 - bucket.tokens) / self.rate

    def charge(self, source: str) -> None:
        """One delivery of `source` was not acted on."""
        if self.rate > 0:
            bucket = self._bucket(source)
            bucket.tokens = max(0.0, bucket.tokens - 1.0)
