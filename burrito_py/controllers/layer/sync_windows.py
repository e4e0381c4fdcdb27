"""Whether a run may be created or started now: sync windows (decided by the layer controller before it
creates a run, docs/architecture.md §5.8) and the repository's pod budget (checked before each pod). Pure."""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from croniter import CroniterBadDateError, croniter

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

    def _last_start(self, now: datetime) -> datetime | None:
        """The cron occurrence at or before `now`; None for a schedule that never fires (`0 0 30 2 *`, burrito's
        way of saying "never"). A malformed schedule raises ValueError (the CRD refuses it first)."""
        try:
            # croniter steps back from just after `now`, so an occurrence at exactly `now` counts.
            start: datetime = croniter(self.schedule, now + timedelta(seconds=1)).get_prev(datetime)
        except CroniterBadDateError:
            return None
        return start

    def active(self, now: datetime) -> bool:
        """True when `now` falls within `duration` after the latest cron occurrence; never for a schedule that
        never fires."""
        length = parse_duration(self.duration)
        start = self._last_start(now)
        return start is not None and start <= now < start + length

    def next_change(self, now: datetime) -> datetime | None:
        """When `active` may next change: the end of the current opening, else the next occurrence."""
        length = parse_duration(self.duration)
        start = self._last_start(now)
        if start is not None and start <= now < start + length:
            return start + length
        try:
            following: datetime = croniter(self.schedule, now).get_next(datetime)
        except CroniterBadDateError:
            return None
        return following

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any]) -> Window:
        """A `syncWindows[]` entry as stored (camelCase, defaults as the CRD gives them)."""
        return cls(
            spec.get("kind", "allow"),
            spec.get("schedule", "* * * * *"),
            spec.get("duration", "1h"),
            tuple(spec.get("actions") or ()),
            tuple(spec.get("layers") or ()),
        )

@dataclass(frozen=True, slots=True)
class Admission:
    allowed: bool
    reason: str
    message: str = ""
    # For a refusal by sync windows: when the verdict may change (None: no window will ever change it).
    wake_at: datetime | None = None


def sync_windows_allow(windows: Sequence[Window], action: str, layer: str, now: datetime) -> Admission:
    """Deny windows win; when allow windows exist for this action and layer, one must be open.

    A window with a malformed schedule or duration refuses (`InvalidSyncWindow`): failing closed and visibly is
    safer than ignoring a deny window nobody can read."""
    relevant = [w for w in windows if w.applies_to(action, layer)]
    try:
        denying = [w for w in relevant if w.kind == "deny" and w.active(now)]
        allows = [w for w in relevant if w.kind == "allow"]
        open_allow = any(w.active(now) for w in allows)
        changes = [t for t in (w.next_change(now) for w in relevant) if t is not None]
    except ValueError as exc:
        return Admission(False, "InvalidSyncWindow", f"{action} blocked: invalid sync window: {exc}")
    wake_at = min(changes, default=None)
    if denying:
        window = denying[0]
        return Admission(
            False,
            "SyncWindowDenied",
            f"{action} blocked by the deny window {window.schedule!r} ({window.duration})",
            wake_at,
        )
    if allows and not open_allow:
        names = ", ".join(repr(w.schedule) for w in allows)
        return Admission(False, "OutsideSyncWindow", f"{action} waits for an allow window to open ({names})", wake_at)
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
