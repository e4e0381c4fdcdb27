"""Kubernetes-style conditions as plain values, and how a new set replaces an old one."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from burrito_py.timeutil import format_time

ConditionStatus = Literal["True", "False", "Unknown"]


@dataclass(frozen=True, slots=True)
class Cond:
    """One computed condition; `lastTransitionTime` is filled in by `merge_conditions`."""

    type: str
    status: bool | None  # None: Unknown
    reason: str
    message: str = ""

    @property
    def status_text(self) -> ConditionStatus:
        return "Unknown" if self.status is None else "True" if self.status else "False"


def merge_conditions(
    previous: Sequence[Mapping[str, Any]] | None, computed: Iterable[Cond], now: datetime
) -> list[dict[str, Any]]:
    """Render `computed` as status conditions, keeping each one's `lastTransitionTime` unless its
    status changed, so rewriting unchanged conditions is a no-op (and costs no API write)."""
    before = {c.get("type"): c for c in previous or ()}
    stamp = format_time(now)
    rendered: list[dict[str, Any]] = []
    for cond in computed:
        old = before.get(cond.type)
        since = stamp
        if old is not None and old.get("status") == cond.status_text and old.get("lastTransitionTime"):
            since = str(old["lastTransitionTime"])
        rendered.append(
            {
                "type": cond.type,
                "status": cond.status_text,
                "reason": cond.reason,
                "message": cond.message,
                "lastTransitionTime": since,
            }
        )
    return rendered
