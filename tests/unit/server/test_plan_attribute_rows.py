"""The plan page's attribute rows (server/ui/queries.py, pure): what the template is given for each changed
resource, and, under hypothesis, never a value Terraform marks sensitive."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from burrito_py.plans.model import parse_plan
from burrito_py.server.ui.queries import AttributeRow, ShownValue, plan_groups

from ..plans.plan_fixtures import diff_fixture
from ..plans.test_attributes import NEW, SECRET_PREFIX, _pair


def test_rows_of_a_real_plan_once_per_resource() -> None:
    groups = plan_groups(parse_plan(diff_fixture("attributes"), attributes=True))
    (db,) = groups["replace"]
    assert AttributeRow("triggers_replace[0]", "change", ShownValue('"v1"', False), ShownValue('"v2"', False),
                        True) in db.attributes
    secret = next(item for item in groups["update"] if item.address == "terraform_data.secret")
    assert secret.attributes[0] == AttributeRow("input", "change", ShownValue("(sensitive)", True),
                                                ShownValue("(sensitive)", True), False)
    (new,) = groups["create"]
    assert AttributeRow("input", "add", ShownValue("", False), ShownValue('"fresh"', False), False) in new.attributes
    assert NEW not in repr(groups)


def test_a_resource_in_two_groups_has_its_rows_in_the_first() -> None:
    plan = parse_plan({"resource_changes": [{
        "address": "t.new", "previous_address": "t.old", "type": "t", "name": "new",
        "change": {"actions": ["update"], "before": {"a": "1"}, "after": {"a": "2"}}}]}, attributes=True)
    groups = plan_groups(plan)
    assert [len(item.attributes) for item in groups["update"]] == [1]
    assert [len(item.attributes) for item in groups["moved"]] == [0]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(_pair(3), _pair(3)), min_size=1, max_size=4))
def test_no_row_holds_a_sensitive_value(pairs: list[tuple[tuple[Any, Any], tuple[Any, Any]]]) -> None:
    document = {"resource_changes": [
        {"address": f"t.r{i}", "type": "t", "name": f"r{i}",
         "change": {"actions": ["update"], "before": {"a": before[0]}, "after": {"a": after[0]},
                    "before_sensitive": {"a": before[1]}, "after_sensitive": {"a": after[1]}}}
        for i, (before, after) in enumerate(pairs)]}
    assert SECRET_PREFIX not in repr(plan_groups(parse_plan(document, attributes=True)))
