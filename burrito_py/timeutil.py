"""RFC 3339 UTC timestamps, the only time format burrito-py writes (annotations included)."""

from __future__ import annotations

from datetime import UTC, datetime


def utcnow() -> datetime:
    return datetime.now(UTC)


def format_time(moment: datetime) -> str:
    """`2026-11-22T08:44:00Z`: second precision, always UTC, as Kubernetes writes times."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def format_time_precise(moment: datetime) -> str:
    """`2026-11-22T08:44:00.123456Z`: for times compared with each other within one second (sync requests
    against syncs, runs created together), where whole seconds would make "before" and "after" equal."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(text: str | None) -> datetime | None:
    """Parse an RFC 3339 time; `None` for missing or unparsable input (callers treat it as absent)."""
    if not text:
        return None
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.astimezone(UTC)
