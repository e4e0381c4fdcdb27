"""The plan model on real `terraform show -json` output: exact actions, reasons, counts and summaries, masked
sensitive values, and errors that name the field."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from burrito_py.plans.model import MASK, NO_CHANGES, PlanFormatError, is_summary_line, parse_plan, plan_summary

from .plan_fixtures import SECRET, fixture, fixture_names, generated_plan

# fixture → (summary, [(address, action, action_reason, moved, importing)], resource_drift addresses)
EXPECTED: dict[str, tuple[str, list[tuple[str, str, str | None, bool, bool]], list[str]]] = {
    "create": ("Plan: 2 to add, 0 to change, 0 to destroy",
               [("terraform_data.a", "create", None, False, False), ("terraform_data.b", "create", None, False, False)],
               []),
    "update": ("Plan: 0 to add, 1 to change, 0 to destroy", [("terraform_data.a", "update", None, False, False)], []),
    "delete": ("Plan: 0 to add, 0 to change, 1 to destroy",
               [("terraform_data.gone", "delete", "delete_because_no_resource_config", False, False)], []),
    "replace": ("Plan: 1 to add, 0 to change, 1 to destroy",
                [("terraform_data.db", "replace", "replace_because_cannot_update", False, False)], []),
    "replace_stateful": ("Plan: 1 to add, 0 to change, 1 to destroy",
                         [("aws_db_instance.main", "replace", "replace_because_cannot_update", False, False)], []),
    "moved": ("Plan: 0 to add, 0 to change, 0 to destroy", [("terraform_data.new", "no-op", None, True, False)], []),
    "import": ("Plan: 1 to import, 0 to add, 0 to change, 0 to destroy",
               [("terraform_data.imported", "no-op", None, False, True)], []),
    "drift_only": ("Plan: 0 to add, 1 to change, 0 to destroy", [("terraform_data.a", "update", None, False, False)],
                   []),
    "drift_only_refresh": ("Plan: 0 to add, 1 to change, 0 to destroy",
                           [("terraform_data.a", "update", None, False, False)], ["terraform_data.a"]),
    "code_and_drift": ("Plan: 0 to add, 2 to change, 0 to destroy",
                       [("terraform_data.a", "update", None, False, False),
                        ("terraform_data.b", "update", None, False, False)], []),
    "code_and_drift_refresh": ("Plan: 0 to add, 2 to change, 0 to destroy",
                               [("terraform_data.a", "update", None, False, False),
                                ("terraform_data.b", "update", None, False, False)], ["terraform_data.a"]),
    "no_changes": (NO_CHANGES, [], []),
    "sensitive": ("Plan: 1 to add, 0 to change, 0 to destroy", [("terraform_data.s", "create", None, False, False)],
                  []),
}


def test_every_fixture_has_an_expectation() -> None:
    assert sorted(EXPECTED) == fixture_names()


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_fixture(name: str) -> None:
    summary, changed, drift = EXPECTED[name]
    plan = parse_plan(fixture(name))
    assert plan.summary() == summary and is_summary_line(plan_summary(fixture(name)))
    assert plan.has_changes == (summary != NO_CHANGES)
    assert [(rc.address, rc.action, rc.action_reason, rc.moved, rc.importing) for rc in plan.changed()] == changed
    assert [rc.address for rc in plan.resource_drift] == drift
    assert plan.terraform_version == "1.11.4" and not plan.errored


def test_replace_counts_once_and_keeps_its_paths() -> None:
    plan = parse_plan(fixture("replace"))
    (db,) = plan.changed()
    assert db.actions == ("delete", "create") and db.replace_paths == (("triggers_replace",),)
    assert (plan.counts.add, plan.counts.destroy, plan.counts.replace, plan.counts.total) == (1, 1, 1, 1)


def test_moved_and_import_are_counted() -> None:
    moved, imported = parse_plan(fixture("moved")), parse_plan(fixture("import"))
    assert moved.counts.moved == 1 and moved.changed()[0].previous_address == "terraform_data.old"
    assert imported.counts.imported == 1 and imported.counts.total == 1


def test_sensitive_values_never_leave_the_model() -> None:
    raw = fixture("sensitive")
    assert SECRET in json.dumps(raw)  # terraform's JSON holds it, marked sensitive
    plan = parse_plan(raw)
    (created,) = plan.changed()
    assert created.after["input"] == MASK
    assert SECRET not in json.dumps(plan.policy_input())
    assert SECRET not in repr(plan)
    assert [(o.name, o.sensitive) for o in plan.output_changes] == [("password", True)]


def test_policy_input_keeps_terraforms_shape() -> None:
    document = parse_plan(fixture("replace")).policy_input()
    change = document["resource_changes"][0]
    assert change["type"] == "terraform_data" and change["change"]["actions"] == ["delete", "create"]
    assert change["action_reason"] == "replace_because_cannot_update"


BAD_DOCUMENTS = [
    ({"resource_changes": {}}, "resource_changes: expected a list"),
    ({"resource_changes": [1]}, "resource_changes[0]: expected an object"),
    ({"resource_changes": [{"change": {"actions": "create"}}]}, "resource_changes[0].change.actions"),
    ({"resource_changes": [{"change": {"actions": ["create", "update"]}}]}, "unknown combination"),
    ({"resource_changes": [{"address": 3, "change": {"actions": []}}]}, "resource_changes[0].address"),
    ({"output_changes": []}, "output_changes: expected an object"),
]


@pytest.mark.parametrize(("document", "field"), BAD_DOCUMENTS)
def test_bad_input_names_the_field(document: dict[str, Any], field: str) -> None:
    with pytest.raises(PlanFormatError, match=field.replace("[", r"\[").replace("]", r"\]")):
        parse_plan(document)
    with pytest.raises(PlanFormatError, match="not JSON"):
        parse_plan(b"{nope")


def _old_summary(plan: dict[str, Any]) -> str:
    """The runner's summary before the model (the oracle), plus moves, which it missed."""
    add = change = destroy = imported = forget = moved = 0
    for resource in plan.get("resource_changes") or ():
        block = resource.get("change") or {}
        actions = list(block.get("actions") or ())
        imported += bool(block.get("importing"))
        moved += bool(resource.get("previous_address")) and resource.get("previous_address") != resource["address"]
        if actions in (["delete", "create"], ["create", "delete"]):
            add, destroy = add + 1, destroy + 1
        elif actions == ["create"]:
            add += 1
        elif actions == ["update"]:
            change += 1
        elif actions == ["delete"]:
            destroy += 1
        elif actions == ["forget"]:
            forget += 1
    outputs = any(list((o or {}).get("actions") or ()) not in ([], ["no-op"])
                  for o in (plan.get("output_changes") or {}).values())
    if not (add or change or destroy or imported or forget or moved or outputs):
        return NO_CHANGES
    parts = [f"{imported} to import"] if imported else []
    parts += [f"{add} to add", f"{change} to change", f"{destroy} to destroy"]
    return "Plan: " + ", ".join(parts + ([f"{forget} to forget"] if forget else []))


ACTIONS = st.sampled_from([[], ["no-op"], ["create"], ["update"], ["delete"], ["read"], ["forget"],
                           ["delete", "create"], ["create", "delete"]])
RESOURCES = st.builds(
    lambda i, actions, importing, moved: {
        "address": f"terraform_data.r{i}", "type": "terraform_data", "name": f"r{i}",
        **({"previous_address": f"terraform_data.old{i}"} if moved else {}),
        "change": {"actions": actions, **({"importing": {"id": "x"}} if importing else {})}},
    st.integers(0, 10_000), ACTIONS, st.booleans(), st.booleans())


@settings(max_examples=100)
@given(st.lists(RESOURCES, max_size=12), st.dictionaries(st.sampled_from(["a", "b"]), st.builds(
    lambda a: {"actions": a}, ACTIONS), max_size=2))
def test_the_summary_is_the_old_one_plus_moves(resources: list[dict[str, Any]], outputs: dict[str, Any]) -> None:
    plan = {"resource_changes": resources, "output_changes": outputs}
    assert parse_plan(plan).summary() == _old_summary(plan)
    assert plan_summary(plan) == parse_plan(plan).summary()  # the runner's, counted without the model
    assert is_summary_line(plan_summary(plan))  # the run controller takes it (controllers/run/results.py)


@pytest.mark.parametrize(("document", "field"), [*BAD_DOCUMENTS, *[(other, r"\(document\): expected a JSON object")
                                                                 for other in ([], "plan", 1, None)]])
def test_the_runners_summary_refuses_what_the_model_refuses_in_what_it_reads(document: Any, field: str) -> None:
    with pytest.raises(PlanFormatError, match=field.replace("[", r"\[").replace("]", r"\]")):
        plan_summary(document)


def test_a_thousand_changes() -> None:
    plan = parse_plan(generated_plan(1000))
    assert plan.counts.total == 1000 and len(plan.changed()) == 1000
    assert plan.summary() == "Plan: 500 to add, 250 to change, 500 to destroy"
    assert plan_summary(generated_plan(1000)) == plan.summary()
