"""The caches' Prometheus metrics (served at the datastore's `/metrics`)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge

REQUESTS = Counter(
    "burrito_py_provider_cache_requests_total",
    "Mirror requests by what they asked for (index, version, archive, tool) and result: hit (served from the "
    "cache), miss (read through from upstream), refresh (a cached index read again), error.",
    ["kind", "result"],
)
UPSTREAM_BYTES = Counter("burrito_py_provider_cache_upstream_bytes_total", "Bytes read from upstream.")
ARCHIVE_ROUTES = Counter(
    "burrito_py_provider_cache_archive_routes_total",
    "Provider archives asked for, by route: signed (terraform through the network mirror, a signed URL) or "
    "prefetch (a runner's prefetch of its locked providers, with its token). How many inits the prefetch serves.",
    ["route"],
)
SERVED_BYTES = Counter("burrito_py_provider_cache_served_bytes_total", "Archive bytes served to clients.")
OBJECTS = Gauge("burrito_py_provider_cache_objects", "Archives stored (providers and tools), as this replica knows.")
