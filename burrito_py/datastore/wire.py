"""The datastore's HTTP protocol as its clients speak it, with no HTTP library: URL building, the retry policy,
how an error answer is read, and the headers an upload declares. Shared by `datastore/client.py` (httpx: the
controllers, the server, the CLI) and the runner's own client (`runner/store.py`, the standard library's
`http.client`: importing httpx and building its first client cost a small plan ~0.12 s CPU, issue 31)."""

from __future__ import annotations

import json
from typing import IO
from urllib.parse import quote

SHA_HEADER = "X-Burrito-Sha256"
TREE_HEADER = "X-Burrito-Tree-Id"
RETRIES = 3
MAX_RETRY_AFTER = 5.0


class DatastoreError(Exception):
    """`limit`: on a 413, the most bytes the datastore would have taken."""

    def __init__(self, message: str, status_code: int | None = None, limit: int | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.limit = limit


def stored_sum(hex_digest: str) -> str:
    return f"sha256:{hex_digest.strip().lower()}"


def url_path(*segments: str | int) -> str:
    """A URL path from segments, each percent-encoded whole: a name holding '/', '?', '#' or '%' can never
    address another object (the datastore validates them too, but the URL must reach it intact)."""
    parts = []
    for segment in map(str, segments):
        if segment in ("", ".", ".."):
            raise DatastoreError(f"invalid path segment {segment!r}", 400)
        parts.append(quote(segment, safe=""))
    return "/" + "/".join(parts)


def run_url(ns: str, layer: str, run: str, attempt: int | None) -> str:
    base = url_path("layers", ns, layer, "runs", run)
    return base if attempt is None else f"{base}/attempts/{int(attempt)}"


def retry_after_seconds(header: str | None) -> float:
    """A 5xx's `Retry-After` (seconds, the datastore's form), capped: a retry is never put off for long."""
    return min(float(header), MAX_RETRY_AFTER) if header and header.isdigit() else 0.0


def retry_wait(attempt: int, retry_after: float = 0.0) -> float:
    """Seconds before try `attempt + 1` (from 0) of an idempotent call that got no answer or a 5xx: 0.2 s doubling,
    or what an overloaded datastore asked for (503 + Retry-After, docs/architecture.md §10.7)."""
    return max(0.2 * 2.0**attempt, retry_after)


def error_detail(body: bytes) -> tuple[str, int | None]:
    """What an error answer says, and its `limit` (a 413's): the datastore says `error`, the API server's service
    proxy a Status `message`; else the body as text."""
    text = body.decode("utf-8", errors="replace")
    try:
        answer = json.loads(body)
    except ValueError:
        return text, None
    if not isinstance(answer, dict):
        return text, None
    detail = answer.get("error") or answer.get("message") or text
    limit = answer.get("limit")
    return str(detail), int(limit) if isinstance(limit, int) else None


def declared(handle: IO[bytes]) -> dict[str, str]:
    """The sum and length of a file about to be sent (read once here, then again as it is sent; the handle is left
    at its start): the datastore checks the body against them and, on S3, uploads a large one straight to its key
    rather than staging and copying it (docs/architecture.md §10)."""
    import hashlib  # uploads only: a runner imports this module before `init`, hashlib ~2 ms

    digest, size = hashlib.sha256(), 0
    while chunk := handle.read(1024 * 1024):
        digest.update(chunk)
        size += len(chunk)
    handle.seek(0)
    return {SHA_HEADER: digest.hexdigest(), "Content-Length": str(size)}


def applied_record(plan_sum: str, attempt: int) -> bytes:
    """The body of an attempt's applied record."""
    return json.dumps({"sum": plan_sum, "attempt": int(attempt)}).encode()


def applied_sum(record: bytes) -> str | None:
    """The `sum` of an applied record (`{"sum", "attempt"}`); None when it holds none."""
    try:
        found = json.loads(record).get("sum")
    except (ValueError, AttributeError):
        return None
    return str(found) if found else None


class ServerError(Exception):
    """A 5xx: the datastore may answer the same request later (retried, after its Retry-After)."""

    def __init__(self, status: int, retry_after: str | None = None) -> None:
        super().__init__(f"HTTP {status}")
        self.retry_after = retry_after_seconds(retry_after)


def check_answer(status: int, retry_after: str | None, body: bytes, what: str) -> None:
    """ServerError for a 5xx; DatastoreError naming `what` and the datastore's reason for a 4xx, and for a 3xx: the
    datastore never redirects, and a redirect's empty body must not be taken for the object (a download would
    land an empty plan or archive); the redirect is not followed, so no token goes elsewhere."""
    if status >= 500:
        raise ServerError(status, retry_after)
    if status >= 400:
        detail, limit = error_detail(body)
        raise DatastoreError(f"{what}: {detail or 'not found'}", status, limit)
    if status >= 300:
        raise DatastoreError(f"{what}: the datastore answered with a redirect (HTTP {status}), not followed", status)
