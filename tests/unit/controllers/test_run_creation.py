"""Issue 25 item 3: a TerraformRun the API refuses for a layer is told once per message, shown, and backed off."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from burrito_py.controllers.layer.run_creation import (
    RunCreation,
    announce,
    api_message_of,
    condition,
    last_result,
    refusal_message,
    refused,
    wait_before_creating,
)
from burrito_py.controllers.run.pod_creation import is_blocked_result

NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)
BASE, CAP = timedelta(seconds=15), timedelta(hours=1)
DENIED = 'terraformruns.terraform.burrito-py.io "app-plan-1" is forbidden: ValidatingAdmissionPolicy denied'


def test_burritos_words_name_the_action_and_the_api_error():
    assert refusal_message("plan", DENIED) == f"Failed to create TerraformRun for Plan action: {DENIED}"
    assert refusal_message("apply", "x").startswith("Failed to create TerraformRun for Apply action: ")


def test_the_same_run_refused_again_counts_up_and_waits_longer():
    first = refused(RunCreation(), "plan", "c1", NOW, refusal_message("plan", DENIED))
    assert first.failures == 1 and announce(RunCreation(), first)
    assert wait_before_creating(first, "plan", "c1", NOW + timedelta(seconds=5), BASE, CAP) == timedelta(seconds=10)
    assert wait_before_creating(first, "plan", "c1", NOW + timedelta(seconds=15), BASE, CAP) is None
    second = refused(first, "plan", "c1", NOW + timedelta(seconds=15), first.message)
    assert second.failures == 2 and not announce(first, second), "the same message is not told twice"
    assert wait_before_creating(second, "plan", "c1", NOW + timedelta(seconds=16), BASE, CAP) == timedelta(
        seconds=29)
    other = refused(second, "plan", "c1", NOW + timedelta(seconds=50), refusal_message("plan", "a new answer"))
    assert other.failures == 3 and announce(second, other), "a new message is told"


def test_another_run_is_tried_at_once_and_counts_from_one():
    record = refused(RunCreation(), "plan", "c1", NOW, "m")
    assert wait_before_creating(record, "plan", "c2", NOW, BASE, CAP) is None, "a new commit: try now"
    assert wait_before_creating(record, "apply", "c1", NOW, BASE, CAP) is None
    assert refused(record, "plan", "c2", NOW, "m").failures == 1


@given(st.integers(1, 60))
def test_the_wait_is_bounded_by_five_minutes(failures: int):
    record = RunCreation("plan", "c1", failures, NOW, "m")
    wait = wait_before_creating(record, "plan", "c1", NOW, BASE, CAP)
    assert wait is not None and timedelta(seconds=15) <= wait <= timedelta(minutes=5)


def test_the_refusal_is_a_condition_a_last_result_and_a_status_record():
    record = refused(RunCreation(), "plan", "c1", NOW, refusal_message("plan", DENIED))
    cond = condition(record, NOW + timedelta(seconds=15))
    assert cond is not None and cond.type == "RunCreated" and not cond.status and cond.reason == "RunCreationFailed"
    assert DENIED in cond.message and "next try after" in cond.message
    assert condition(RunCreation(), None) is None
    result = last_result(record, api_message_of(record))
    assert result == f"Plan cannot start: {DENIED}" and is_blocked_result(result), "the AGL's RunCannotStart"
    body = record.to_status()
    assert body is not None and RunCreation.of({"runCreation": body}) == record
    assert RunCreation().to_status() is None
