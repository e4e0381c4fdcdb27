"""Whether a run may start a runner pod now: sync windows and the repository's pod budget (pure)."""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from croniter import croniter

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(h|m|s)")


def parse_duration(text: str) -> timedelta:
    """Go-style durations as burrito writes them: `1h`, `30m`, `1h30m`, `90s`."""
    pos, total = 0, 0.0
    for match in _DURATION.finditer(text):
        if match.start() != pos:
            break
        value, unit = float(match.group(1)), match.group(2)
        total += value * {"h": 3600, "m": 60, "s": 1}[unit]
        pos = match.end()
    if pos != len(text) or not text:
        raise ValueError(f"invalid duration {text!r}: expected e.g. 1h30m, 45m or 90s")
    return timedelta(seconds=total)


@dataclass(frozen=True, slots=True)
class Window:
    kind: str  # allow | deny
    schedule: str
    duration: str
    actions: tuple[str, ...] = ()
    layers: tuple[str, ...] = ()

    def applies_to(self, action: str, layer: str) -> bool:
        return (not self.actions or action in self.actions) and (
            not self.layers or any(fnmatch.fnmatchcase(layer, pattern) for pattern in self.layers)
        )

    def active(self, now: datetime) -> bool:
        """True when `now` falls within `duration` after the latest cron occurrence."""
        length = parse_duration(self.duration)
        # The occurrence at or before now; croniter steps back from just after `now`.
        start: datetime = croniter(self.schedule, now + timedelta(seconds=1)).get_prev(datetime)
        return start <= now < start + length


@dataclass(frozen=True, slots=True)
class Admission:
    allowed: bool
    reason: str
    message: str = ""


def sync_windows_allow(windows: Sequence[Window], action: str, layer: str, now: datetime) -> Admission:
    """Deny windows win; when allow windows exist for this action and layer, one must be open."""
    relevant = [w for w in windows if w.applies_to(action, layer)]
    for window in relevant:
        if window.kind == "deny" and window.active(now):
            return Admission(
                False, "SyncWindowDenied", f"{action} blocked by deny window {window.schedule!r} ({window.duration})"
            )
    allows = [w for w in relevant if w.kind == "allow"]
    if allows and not any(w.active(now) for w in allows):
        return Admission(False, "OutsideSyncWindow", f"{action} waits for an allow window to open")
    return Admission(True, "SyncWindowOpen")


def pod_budget_allows(
    active_runner_pods: int, max_concurrent: int | None, active_total: int = 0, max_total: int | None = None
) -> Admission:
    """The repository's `maxConcurrentRunnerPods`, then the controllers' limit over every runner pod (0 or
    None: no limit)."""
    if max_concurrent is not None and active_runner_pods >= max_concurrent:
        return Admission(
            False,
            "MaxConcurrentRunnerPods",
            f"{active_runner_pods} runner pods active for this repository (limit {max_concurrent})",
        )
    if max_total and active_total >= max_total:
        return Admission(
            False, "MaxConcurrentRunnerPods", f"{active_total} runner pods active (controller-wide limit {max_total})"
        )
    return Admission(True, "WithinPodBudget")
