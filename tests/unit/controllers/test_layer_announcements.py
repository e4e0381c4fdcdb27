"""The Events a layer's status change posts (`controllers/layer/status.py` `announcements`), pure."""

from __future__ import annotations

from typing import Any

from burrito_py.controllers.layer.status import announcements, event_name
from burrito_py.kube.conditions import Cond

READY = Cond("Ready", True, "Ready")
FAILED = "apply failed after 3 retries: exit code 1"


def warned(old: dict[str, Any], new: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [event for event in announcements(old, new, READY) if event[1] == "MaxRetriesReached"]


def test_an_exhausted_apply_is_told_once_even_when_a_drift_check_comes_first() -> None:
    """Fault test (seen in the failing-apply fault test, one run in three): the Warning was posted only on entering
    MaxRetriesReached with an exhaustion not recorded before. When the apply's exhaustion was recorded while a drift
    check already made the layer PlanNeeded, the layer reached MaxRetriesReached later with the record unchanged,
    and no Warning was ever posted: the failure was only in the status. Now it is told when the record comes, once
    per failed run."""
    running = {"state": "Running"}
    recorded = {"state": "PlanNeeded", "exhaustedApply": {"run": "app-apply-1"}, "lastResult": FAILED}
    assert warned(running, recorded) == [("Warning", "MaxRetriesReached", f"run app-apply-1: {FAILED}")]
    held = {**recorded, "state": "MaxRetriesReached"}
    assert warned(recorded, held) == []  # the same failed run: told already
    # Each drift check comes back to the state with the same record: never told again.
    assert warned({**held, "state": "Running"}, held) == []
    # The usual order (the record and the state at once) is told once too; a new failed run is told again.
    assert warned(running, held) == [("Warning", "MaxRetriesReached", f"run app-apply-1: {FAILED}")]
    again = {**held, "exhaustedApply": {"run": "app-apply-2"}}
    assert warned(held, again) == [("Warning", "MaxRetriesReached", f"run app-apply-2: {FAILED}")]
    # A success clears the record: nothing to tell.
    assert warned(held, {"state": "Idle"}) == []


def test_a_failed_runs_warning_told_again_is_the_same_event() -> None:
    """The exhaustion record can come and go between reconciles (a drift check's run decides it meanwhile); told
    when it comes, the same failed run's Warning would be posted twice. Its Event has a name of its own per failed
    run (`event_name`), so the API refuses the second one: told once."""
    held = {"state": "MaxRetriesReached", "exhaustedApply": {"run": "app-apply-1"}}
    name = event_name("app", held, "MaxRetriesReached")
    assert name is not None and name.startswith("app.max-retries-")
    assert event_name("app", {**held, "state": "PlanNeeded"}, "MaxRetriesReached") == name  # the same run
    assert event_name("app", {**held, "exhaustedApply": {"run": "app-apply-2"}}, "MaxRetriesReached") != name
    assert event_name("app", held, "StateChanged") is None  # every other announcement as before
    long = event_name("a" * 253, held, "MaxRetriesReached")
    assert long is not None and len(long) <= 253
