"""A TerraformRun the API refuses to create for a layer (docs/architecture.md §5.2): how it shows on the layer and
when to ask again (pure).

The API may refuse a layer's new run: a 422 (an admission policy or webhook denies it, a field the API rejects),
a 403 (a permission the controllers lack), a 5xx. Burrito says `Failed to create TerraformRun for Plan action:
<API error>`; so do we, once per distinct message, as a Warning event on the layer. The layer records the refusal
in `status.runCreation` (the action and revision it tried, the failures in a row, the API's message), shows the
condition `RunCreated=False` and `lastResult` `<Action> cannot start: <message>` (which an AGL instance shows as
`RunCannotStart`), and asks again for that same run after `failure_grace_period * 2^(n-1)`, at most the smaller of
`failure_grace_period_cap` and 5 minutes, as a refused runner pod does (pod_creation.py). A decision to create
another run (another action or revision) is tried at once. The first run created clears the record.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from burrito_py.controllers.run.pod_creation import RESULT_PREFIX, backoff
from burrito_py.kube.conditions import Cond
from burrito_py.timeutil import format_time, parse_time

CONDITION = "RunCreated"
REASON = "RunCreationFailed"
EVENT_REASON = "RunCreationFailed"  # a 403 is posted as `Forbidden`, as every 403 the controllers meet


@dataclass(frozen=True, slots=True)
class RunCreation:
    """`status.runCreation` of a layer: the run it could not create, and how often in a row."""

    action: str = ""
    revision: str = ""
    failures: int = 0
    last_failure: datetime | None = None
    message: str = ""

    @classmethod
    def of(cls, status: Mapping[str, Any]) -> RunCreation:
        raw = status.get("runCreation") or {}
        return cls(str(raw.get("action") or ""), str(raw.get("revision") or ""), int(raw.get("failures") or 0),
                   parse_time(raw.get("lastFailure")), str(raw.get("message") or ""))

    def to_status(self) -> dict[str, Any] | None:
        if self.failures <= 0:
            return None
        return {"action": self.action, "revision": self.revision, "failures": self.failures,
                "lastFailure": format_time(self.last_failure) if self.last_failure else None,
                "message": self.message[:1000]}

    def same_run(self, action: str, revision: str) -> bool:
        return self.failures > 0 and (self.action, self.revision) == (action, revision)


def refusal_message(action: str, api_message: str) -> str:
    """Burrito's words: `Failed to create TerraformRun for Plan action: <API error>`."""
    return f"Failed to create TerraformRun for {action.capitalize()} action: {api_message}"[:1000]


def refused(record: RunCreation, action: str, revision: str, now: datetime, message: str) -> RunCreation:
    """The record after one more refusal of (action, revision); `message` is the refusal's (refusal_message)."""
    failures = record.failures + 1 if record.same_run(action, revision) else 1
    return RunCreation(action, revision, failures, now, message)


def announce(before: RunCreation, after: RunCreation) -> bool:
    """Whether the refusal deserves a Warning event: once per distinct message, not once per try."""
    return after.failures > 0 and after.message != before.message


def wait_before_creating(record: RunCreation, action: str, revision: str, now: datetime, base: timedelta,
                         cap: timedelta) -> timedelta | None:
    """Time left before (action, revision) may be tried again; None when it may be tried now."""
    if not record.same_run(action, revision) or record.last_failure is None:
        return None
    due = record.last_failure + backoff(record.failures, base, cap)
    return due - now if now < due else None


def condition(record: RunCreation, next_try: datetime | None) -> Cond | None:
    """`RunCreated=False` while the layer's run is refused; nothing otherwise."""
    if record.failures <= 0:
        return None
    when = f"; next try after {next_try.isoformat()}" if next_try is not None else ""
    return Cond(CONDITION, False, REASON, f"{record.message} ({record.failures} refused creation(s){when})")


def next_try(record: RunCreation, base: timedelta, cap: timedelta) -> datetime | None:
    if record.failures <= 0 or record.last_failure is None:
        return None
    return record.last_failure + backoff(record.failures, base, cap)


def last_result(record: RunCreation, api_message: str) -> str:
    """The layer's lastResult while its run is refused (an AGL instance reads it as RunCannotStart)."""
    return f"{record.action.capitalize()} {RESULT_PREFIX}{api_message}"[:300]


def api_message_of(record: RunCreation) -> str:
    """The API's own words, from the recorded message."""
    _, _, rest = record.message.partition(" action: ")
    return rest or record.message
