"""Deliver one notification to one target, retrying what may succeed later (connection errors, timeouts, 429
with its Retry-After, 5xx) with exponential backoff; any other 4xx or 3xx is final (redirects are not followed).
The URL is a credential: it never appears in a log line or a result. Deliveries go through `notification_client`:
a destination the outbound address guard refuses is never contacted, and is not retried; a connection that fails
is "could not connect", whatever the network said."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass

import httpx

from burrito_py.notify.message import Notification, render
from burrito_py.notify.sign import DELIVERY_HEADER, EVENT_HEADER, SIGNATURE_HEADER, signature
from burrito_py.outbound import AsyncGuardedTransport, OutboundPolicy, OutboundRefused, Unresolvable

__all__ = ["DeliveryResult", "Target", "deliver", "notification_client"]

log = logging.getLogger(__name__)


# Set while a delivery runs (in its task's context, which httpx logs from): httpx logs each request's URL at INFO in
# its own normalised spelling (lower-case scheme and host, default port dropped, spaces encoded), so no redaction of
# the Secret's spelling catches every form. Its request line is left out of the log for a delivery instead.
_DELIVERING: ContextVar[bool] = ContextVar("notification_delivery", default=False)


class _NoDeliveryLines(logging.Filter):
    """A webhook URL is a credential: httpx's lines logged during a delivery are dropped (the outcome is recorded
    on the notifier and counted in a metric)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not _DELIVERING.get()


logging.getLogger("httpx").addFilter(_NoDeliveryLines())


@dataclass(frozen=True, slots=True)
class Target:
    kind: str  # slack | teams | webhook
    url: str
    hmac_key: bytes | None = None
    name: str = ""  # the notifier (namespace/name), for logs

    def __repr__(self) -> str:  # never the URL or the key
        return f"Target({self.kind}, {self.name})"


@dataclass(frozen=True, slots=True)
class DeliveryResult:
    ok: bool
    attempts: int
    status_code: int | None
    error: str | None = None
    refused: bool = False  # by the outbound address guard: nothing was sent


def notification_client(policy: OutboundPolicy, timeout: float = 10.0) -> httpx.AsyncClient:
    """The client deliveries go through: the outbound address guard decides where it may connect, no proxy, and no
    redirect is followed (a 3xx is a final refusal)."""
    return httpx.AsyncClient(transport=AsyncGuardedTransport(policy), timeout=timeout, follow_redirects=False)


def _retry_after(response: httpx.Response) -> float | None:
    try:
        return float(response.headers.get("Retry-After", ""))
    except ValueError:
        return None


async def deliver(
    target: Target,
    notification: Notification,
    *,
    client: httpx.AsyncClient,
    attempts: int = 5,
    base_delay: float = 0.5,
    max_delay: float = 30.0,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> DeliveryResult:
    body = render(target.kind, notification)
    headers = {"Content-Type": "application/json", EVENT_HEADER: notification.event,
               DELIVERY_HEADER: notification.delivery_id}
    if target.hmac_key is not None:
        headers[SIGNATURE_HEADER] = signature(body, target.hmac_key)
    delivering = _DELIVERING.set(True)
    try:
        return await _attempts(target, notification, body, headers, client, attempts, base_delay, max_delay, sleep)
    finally:
        _DELIVERING.reset(delivering)


async def _attempts(
    target: Target, notification: Notification, body: bytes, headers: dict[str, str], client: httpx.AsyncClient,
    attempts: int, base_delay: float, max_delay: float, sleep: Callable[[float], Awaitable[None]],
) -> DeliveryResult:
    status: int | None = None
    error = "not attempted"
    for attempt in range(1, attempts + 1):
        delay = min(base_delay * 2 ** (attempt - 1), max_delay)
        try:
            response = await client.post(target.url, content=body, headers=headers)
        except httpx.InvalidURL:
            # Not an HTTPError: it escaped, so no outcome was recorded, and its text quotes part of the URL (a
            # credential, from a Secret). Nothing was sent, and a retry would fail alike.
            return DeliveryResult(False, attempt, None, "the URL is not a valid URL", refused=True)
        except OutboundRefused as exc:  # nothing was sent, and nothing will be on a retry
            log.warning("notification %s to %r refused: %s", notification.event, target, exc)
            return DeliveryResult(False, attempt, None, str(exc), refused=True)
        except Unresolvable as exc:
            status, error = None, str(exc)
        except httpx.TransportError:
            # One answer whether the port was closed, filtered or reset: never a port scan's (and the exception's
            # text may hold the URL).
            status, error = None, "could not connect"
        except httpx.HTTPError as exc:
            status, error = None, f"{type(exc).__name__}"
        else:
            status = response.status_code
            if status < 300:
                return DeliveryResult(True, attempt, status)
            error = f"HTTP {status}"
            if status == 429:
                delay = min(_retry_after(response) or delay, max_delay)
            elif status < 500:
                log.warning("notification %s to %r refused: HTTP %d (not retried)", notification.event, target,
                            status)
                return DeliveryResult(False, attempt, status, error)
        if attempt < attempts:
            await sleep(delay)
    log.warning("notification %s to %r failed after %d attempts: %s", notification.event, target, attempts, error)
    return DeliveryResult(False, attempts, status, error)
