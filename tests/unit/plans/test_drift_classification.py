"""Drift told apart from code changes: each fixture with the code changed or not, and generated plans."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from burrito_py.plans.drift import classify_drift
from burrito_py.plans.model import parse_plan

from .plan_fixtures import fixture


@pytest.mark.parametrize(("name", "code_changed", "state"), [
    ("drift_only", False, "Drifted"),            # the state changed behind terraform's back, same code
    ("drift_only_refresh", False, "Drifted"),
    ("drift_only_refresh", True, "CodeChange"),  # a new commit came with it: a code change, not drift
    ("code_and_drift", True, "CodeChange"),
    ("code_and_drift_refresh", True, "CodeChange"),
    ("update", True, "CodeChange"),
    ("no_changes", False, "InSync"),
    ("no_changes", True, "InSync"),
    ("moved", True, "CodeChange"),
    ("create", None, "Unknown"),                 # never applied: nothing to compare with
])
def test_fixtures(name: str, code_changed: bool | None, state: str) -> None:
    assert classify_drift(parse_plan(fixture(name)), code_changed=code_changed) == state


def test_no_plan_or_an_errored_plan_is_unknown() -> None:
    assert classify_drift(None, code_changed=False) == "Unknown"
    assert classify_drift(parse_plan({**fixture("update"), "errored": True}), code_changed=False) == "Unknown"


CHANGE = st.builds(lambda i, a: {"address": f"terraform_data.r{i}", "change": {"actions": a}},
                   st.integers(0, 99), st.sampled_from([[], ["no-op"], ["create"], ["update"], ["delete"], ["read"]]))


@settings(max_examples=100)
@given(st.lists(CHANGE, max_size=6), st.lists(CHANGE, max_size=6), st.none() | st.booleans())
def test_never_drifted_for_a_code_change_nor_without_changes(
    changes: list[dict[str, Any]], drift: list[dict[str, Any]], code_changed: bool | None
) -> None:
    plan = parse_plan({"resource_changes": changes, "resource_drift": drift})
    state = classify_drift(plan, code_changed=code_changed)
    if code_changed is not False or not plan.has_changes:
        assert state != "Drifted"
    if code_changed is False and plan.has_changes:
        assert state == "Drifted"
