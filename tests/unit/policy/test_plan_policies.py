"""Plan policies: every built-in rule on every fixture plan gives an exact verdict; the same rule as built-in,
CEL and Rego gives identical verdicts (fixtures and generated plans); levels, errors and selection."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from burrito_py.plans.model import parse_plan
from burrito_py.policy.evaluate import evaluate
from burrito_py.policy.select import select_policies

from ..plans.plan_fixtures import SECRET, fixture, fixture_names, generated_plan
from .policies import SAME_RULE, cluster_policy, policy, written

# fixture → rule → addresses denied (None: the rule passes). maxChanges names no address: [] means denied.
BUILTIN: dict[str, dict[str, Any]] = {
    "noDestroy": {"noDestroy": {}},
    "noReplace": {"noReplace": {"types": ["aws_db_*"]}},
    "maxChanges": {"maxChanges": {"total": 1}},
    "denyTypes": {"denyTypes": ["terraform_*"]},
    "allowTypes": {"allowTypes": ["aws_*"]},
    "driftUpdateOnly": {"driftUpdateOnly": {}},
}
EXPECTED: dict[str, dict[str, list[str] | None]] = {
    "create": {"denyTypes": ["terraform_data.a", "terraform_data.b"], "allowTypes": ["terraform_data.a",
               "terraform_data.b"], "maxChanges": [], "driftUpdateOnly": ["terraform_data.a", "terraform_data.b"]},
    "update": {"denyTypes": ["terraform_data.a"], "allowTypes": ["terraform_data.a"]},
    "delete": {"noDestroy": ["terraform_data.gone"], "denyTypes": ["terraform_data.gone"],
               "allowTypes": ["terraform_data.gone"], "driftUpdateOnly": ["terraform_data.gone"]},
    "replace": {"noDestroy": ["terraform_data.db"], "denyTypes": ["terraform_data.db"],
                "allowTypes": ["terraform_data.db"], "driftUpdateOnly": ["terraform_data.db"]},
    "replace_stateful": {"noDestroy": ["aws_db_instance.main"], "noReplace": ["aws_db_instance.main"],
                         "driftUpdateOnly": ["aws_db_instance.main"]},
    "moved": {"denyTypes": ["terraform_data.new"], "allowTypes": ["terraform_data.new"],
              "driftUpdateOnly": ["terraform_data.new"]},
    "import": {"denyTypes": ["terraform_data.imported"], "allowTypes": ["terraform_data.imported"],
               "driftUpdateOnly": ["terraform_data.imported"]},
    "drift_only": {"denyTypes": ["terraform_data.a"], "allowTypes": ["terraform_data.a"]},
    "drift_only_refresh": {"denyTypes": ["terraform_data.a"], "allowTypes": ["terraform_data.a"]},
    "code_and_drift": {"denyTypes": ["terraform_data.a", "terraform_data.b"],
                       "allowTypes": ["terraform_data.a", "terraform_data.b"], "maxChanges": []},
    "code_and_drift_refresh": {"denyTypes": ["terraform_data.a", "terraform_data.b"],
                               "allowTypes": ["terraform_data.a", "terraform_data.b"], "maxChanges": []},
    "no_changes": {},
    "sensitive": {"denyTypes": ["terraform_data.s"], "allowTypes": ["terraform_data.s"],
                  "driftUpdateOnly": ["terraform_data.s"]},
}


def test_every_fixture_is_judged() -> None:
    assert sorted(EXPECTED) == fixture_names()


@pytest.mark.parametrize("name", sorted(EXPECTED))
@pytest.mark.parametrize("rule", sorted(BUILTIN))
def test_builtin_rules_on_fixtures(name: str, rule: str) -> None:
    # driftUpdateOnly judges drift corrections only: the plans are judged as such here.
    verdict = evaluate([policy([{"name": "r", **BUILTIN[rule]}])], parse_plan(fixture(name)), plan_sum="sha256:x",
                       drift_correction=True)
    want = EXPECTED[name].get(rule)
    if want is None:
        assert verdict.result == "Allowed" and verdict.results == []
    else:
        (result,) = verdict.results
        assert (verdict.result, result.outcome, result.addresses) == ("GatesAutoApply", "deny", want)


def test_drift_update_only_lets_a_code_change_through() -> None:
    verdict = evaluate([policy([{"name": "r", "driftUpdateOnly": {}}])], parse_plan(fixture("delete")),
                       plan_sum="s", drift_correction=False)
    assert verdict.result == "Allowed"


def _outcome(style: int, rule: str, plan: dict[str, Any]) -> tuple[str, list[str]]:
    verdict = evaluate([policy([written(style, rule)])], parse_plan(plan), plan_sum="s", drift_correction=False)
    assert all(r.outcome != "error" for r in verdict.results), verdict.results
    return verdict.result, sorted(a for r in verdict.results for a in r.addresses)


@pytest.mark.parametrize("name", fixture_names())
@pytest.mark.parametrize("rule", sorted(SAME_RULE))
def test_builtin_cel_and_rego_agree_on_fixtures(name: str, rule: str) -> None:
    plan = fixture(name)
    assert _outcome(0, rule, plan) == _outcome(1, rule, plan) == _outcome(2, rule, plan)


TYPES = st.sampled_from(["aws_db_instance", "aws_iam_role", "aws_s3_bucket", "terraform_data"])
ACTIONS = st.sampled_from([["no-op"], ["read"], ["create"], ["update"], ["delete"], ["delete", "create"],
                           ["create", "delete"]])


@st.composite
def plans(draw: st.DrawFn) -> dict[str, Any]:
    changes = []
    for i in range(draw(st.integers(0, 6))):
        type_ = draw(TYPES)
        changes.append({"address": f"{type_}.r{i}", "type": type_, "name": f"r{i}", "mode": "managed",
                        "change": {"actions": draw(ACTIONS), "before": {"id": str(i)}, "after": {"id": str(i)}}})
    return {"format_version": "1.2", "resource_changes": changes}


@settings(max_examples=40, deadline=None)
@given(plans(), st.sampled_from(sorted(SAME_RULE)))
def test_builtin_cel_and_rego_agree_on_generated_plans(plan: dict[str, Any], rule: str) -> None:
    assert _outcome(0, rule, plan) == _outcome(1, rule, plan) == _outcome(2, rule, plan)


def test_levels() -> None:
    plan = parse_plan(fixture("delete"))
    deny = [{"name": "no-destroy", "noDestroy": {}}]
    assert evaluate([policy(deny, "advisory")], plan, plan_sum="s", drift_correction=False).result == "Warned"
    assert evaluate([policy(deny, "gateAutoApply")], plan, plan_sum="s", drift_correction=False).result == \
        "GatesAutoApply"
    assert evaluate([policy(deny, "mandatory"), policy(deny, "advisory", name="q")], plan, plan_sum="s",
                    drift_correction=False).result == "Denied"
    warn = [{"name": "w", "action": "warn", "noDestroy": {}}]
    verdict = evaluate([policy(warn, "mandatory")], plan, plan_sum="s", drift_correction=False)
    assert verdict.result == "Warned" and verdict.status_view()["warned"][0]["rule"] == "w"


def test_errors_deny_and_never_show_messages_in_status() -> None:
    plan = parse_plan(fixture("sensitive"))
    broken = [{"name": "cel", "cel": {"expression": "change.after.input == "}},
              {"name": "not-bool", "cel": {"expression": "change.address"}},
              {"name": "rego", "rego": {"module": "package x\ndeny contains msg if { msg := input.nope[ }"}},
              {"name": "echo", "rego": {"module": 'package echo\nimport rego.v1\ndeny contains '
                                                 'sprintf("%v", [rc.change.after]) if { some rc in '
                                                 'input.resource_changes }'}}]
    verdict = evaluate([policy(broken, "mandatory")], plan, plan_sum="s", drift_correction=False)
    assert verdict.result == "Denied"
    assert [r.outcome for r in verdict.results] == ["error", "error", "error", "deny"]
    view = json.dumps(verdict.status_view())
    assert "messages" not in view and SECRET not in view
    assert SECRET not in json.dumps(verdict.model_dump())  # rules read masked values only


def test_conftest_old_syntax_and_warn() -> None:
    module = 'package main\ndeny[msg] { input.resource_changes[_].type == "terraform_data"; msg := "no tf data" }\n' \
             'warn[msg] { count(input.resource_changes) > 0; msg := "changes" }\n'
    verdict = evaluate([policy([{"name": "conftest", "rego": {"module": module}}])], parse_plan(fixture("update")),
                       plan_sum="s", drift_correction=False)
    assert sorted((r.outcome, r.messages[0]) for r in verdict.results) == [("deny", "no tf data"), ("warn", "changes")]


def test_a_thousand_changes() -> None:
    plan = parse_plan(generated_plan(1000))
    verdict = evaluate([policy([written(0, "deny-iam")])], plan, plan_sum="s", drift_correction=False)
    (result,) = verdict.results
    assert result.count == 333 and len(result.addresses) == 20  # every third resource; the addresses kept are bounded


@pytest.mark.parametrize(("rules", "message"), [
    ([{"name": "a"}], "exactly one of"),
    ([{"name": "a", "noDestroy": {}, "denyTypes": ["x"]}], "found noDestroy, denyTypes"),
    ([{"name": "a", "noDestroy": {}}, {"name": "a", "noReplace": {}}], "used twice"),
    ([], "at least 1"),
])
def test_invalid_policies_say_why(rules: list[dict[str, Any]], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        policy(rules)
    with pytest.raises(ValidationError, match="enforcement"):
        policy([{"name": "a", "noDestroy": {}}], enforcement="sometimes")


def test_selection() -> None:
    mine = policy([written(0, "no-destroy")], layer_selector={"matchLabels": {"tier": "data"}})
    other_ns = policy([written(0, "no-destroy")], namespace="other", name="o")
    prod = cluster_policy([written(0, "no-destroy")], namespace_selector={"matchExpressions": [
        {"key": "env", "operator": "In", "values": ["prod"]}]})
    everywhere = cluster_policy([written(0, "no-destroy")], name="all")
    chosen = select_policies("default", {"tier": "data"}, {"env": "prod"}, [mine, other_ns], [prod, everywhere])
    assert [p.name for p in chosen] == ["p", "cp", "all"]
    assert [p.name for p in select_policies("default", {}, {"env": "dev"}, [mine, other_ns], [prod, everywhere])] \
        == ["all"]
    # An AGL layer's definition names the cluster policies that judge it, whatever their selectors say.
    assert [p.name for p in select_policies("default", {}, {"env": "dev"}, [], [prod, everywhere], ["cp"])] \
        == ["cp", "all"]
    # Labels that could not be read: a namespaceSelector picks the namespace (fail closed); layerSelectors still apply.
    assert [p.name for p in select_policies("default", {}, None, [mine], [prod, everywhere])] == ["cp", "all"]
