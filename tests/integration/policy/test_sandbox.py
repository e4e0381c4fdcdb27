"""The policy sandbox (policy/sandbox.py) with real worker processes: normal policies judge exactly as in
process; the hostile rules of a tenant (tests/unit/policy/hostile.py) are stopped by the wall-clock, CPU, memory
and per-plan limits, each a denial naming the limit; one namespace cannot hold every worker; the controllers'
event loop keeps running while a rule does; a rule sees none of the controllers' environment."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest

from burrito_py.api import annotations as ann
from burrito_py.api.policy import TerraformPlanPolicy
from burrito_py.controllers.layer.notifications import notifications_due
from burrito_py.controllers.layer.plan_review import PlanReading, plan_facts, review_plan
from burrito_py.notify.message import render
from burrito_py.plans.model import PlanModel, parse_plan
from burrito_py.policy.evaluate import evaluate
from burrito_py.policy.sandbox import Limits, PolicySandbox
from burrito_py.policy.verdict import Verdict

from ...unit.plans.plan_fixtures import fixture, generated_plan
from ...unit.policy.hostile import (
    CEL_MEMORY_BOMB,
    ENV_PROBE,
    ENV_PROBE_REGO,
    LOOPING_REGO,
    REGO_MEMORY_BOMB,
    WORST_CEL,
)
from ...unit.policy.policies import SAME_RULE, policy, written

pytestmark = pytest.mark.slow

PLAN = parse_plan(json.dumps(generated_plan(30)).encode())
NORMAL = [{"name": "no-iam", "cel": {"expression": "!change.type.startsWith('aws_iam_')"}}]


@pytest.fixture
async def sandbox() -> AsyncIterator[PolicySandbox]:
    box = PolicySandbox(Limits(rule_seconds=1.0, plan_seconds=5.0))
    yield box
    await box.close()


async def judge(box: PolicySandbox, rules: list[dict[str, object]], namespace: str = "team-a",
                plan: PlanModel = PLAN, name: str = "p") -> Verdict:
    return await box.evaluate([policy(rules, "mandatory", name=name, namespace=namespace)], plan,
                              namespace=namespace, plan_sum="sha256:x", drift_correction=False)


def errors(verdict: Verdict) -> list[str | None]:
    return [r.error for r in verdict.results]


async def test_normal_policies_judge_as_in_process(sandbox: PolicySandbox) -> None:
    for name in ("create", "replace_stateful", "moved", "sensitive"):
        plan = parse_plan(fixture(name))
        for rule in SAME_RULE:
            policies = [policy([written(style, rule)], name=f"p{style}") for style in range(3)]
            here = evaluate(policies, plan, plan_sum="s", drift_correction=True)
            there = await sandbox.evaluate(policies, plan, namespace="default", plan_sum="s", drift_correction=True)
            assert there == here, (name, rule)


async def test_worst_cel_rule_is_a_denial_naming_the_time_limit(sandbox: PolicySandbox) -> None:
    await judge(sandbox, NORMAL)  # a worker running: the time measured is the rule's
    started = time.monotonic()
    verdict = await judge(sandbox, [{"name": "worst", "cel": {"expression": WORST_CEL, "scope": "plan"}}])
    elapsed = time.monotonic() - started
    assert verdict.result == "Denied"
    assert errors(verdict) == ["rule worst of policy team-a/p exceeded the 1 s evaluation limit"]
    assert elapsed < 1.0 + 2.0, elapsed  # the limit, plus killing the worker (generous for a shared machine)
    # Its worker was killed; the next plan is judged by a fresh one.
    assert (await judge(sandbox, NORMAL)).result == "Denied" and errors(await judge(sandbox, NORMAL)) == [None]


async def test_looping_rego_rule_is_a_denial_naming_the_time_limit(sandbox: PolicySandbox) -> None:
    await judge(sandbox, NORMAL)
    started = time.monotonic()
    verdict = await judge(sandbox, [{"name": "loop", "rego": {"module": LOOPING_REGO}}])
    assert time.monotonic() - started < 1.0 + 2.0
    assert verdict.result == "Denied"
    assert errors(verdict) == ["rule loop of policy team-a/p exceeded the 1 s evaluation limit"]


@pytest.mark.parametrize("rule", [{"cel": {"expression": CEL_MEMORY_BOMB, "scope": "plan"}},
                                  {"rego": {"module": REGO_MEMORY_BOMB}}], ids=["cel", "rego"])
async def test_memory_bombs_are_stopped_by_the_memory_limit(rule: dict[str, object]) -> None:
    box = PolicySandbox(Limits(rule_seconds=20.0, plan_seconds=20.0, memory_mib=64))
    try:
        verdict = await judge(box, [{"name": "bomb", **rule}])
        assert verdict.result == "Denied"
        assert errors(verdict) == ["rule bomb of policy team-a/p exceeded the 64 MiB memory limit"]
        assert errors(await judge(box, NORMAL)) == [None]  # a fresh worker for the next plan
    finally:
        await box.close()


async def test_cpu_limit_stops_a_rule_the_wall_clock_would_let_run() -> None:
    box = PolicySandbox(Limits(rule_seconds=60.0, plan_seconds=60.0, cpu_seconds=1))
    try:
        verdict = await judge(box, [{"name": "worst", "cel": {"expression": WORST_CEL, "scope": "plan"}}])
        assert errors(verdict) == ["rule worst of policy team-a/p exceeded the 1 s CPU limit"]
    finally:
        await box.close()


async def test_a_plans_rules_share_one_budget() -> None:
    box = PolicySandbox(Limits(rule_seconds=1.0, plan_seconds=1.5))
    slow = {"cel": {"expression": WORST_CEL, "scope": "plan"}}
    try:
        await judge(box, NORMAL)
        verdict = await judge(box, [{"name": "one", **slow}, {"name": "two", **slow}, {"name": "three", **slow}])
        assert errors(verdict) == [
            "rule one of policy team-a/p exceeded the 1 s evaluation limit",
            "rule two of policy team-a/p exceeded the 1.5 s evaluation budget of a plan",
            "rule three of policy team-a/p was not evaluated: the plan's 1.5 s evaluation budget was spent",
        ]
    finally:
        await box.close()


async def test_a_worker_that_dies_mid_rule_is_a_denial_never_a_pass(sandbox: PolicySandbox) -> None:
    await judge(sandbox, NORMAL)
    # The pool warm first (every worker started and idle), then the worker that leaves it is the rule's: a fixed
    # 0.3 s once found no worker busy yet, or the rule on a worker started after the pids were taken (a loaded CI).
    deadline = time.monotonic() + 30
    while len(sandbox._idle) < sandbox.limits.workers:
        assert time.monotonic() < deadline, "the pool never had every worker idle"
        await asyncio.sleep(0.05)
    pids = {w.process.pid for w in sandbox._idle}

    async def kill_the_busy_worker() -> None:
        give_up = time.monotonic() + 30
        while not (busy := pids - {w.process.pid for w in sandbox._idle}):
            assert time.monotonic() < give_up, "no worker took the rule"
            await asyncio.sleep(0.01)
        (pid,) = busy
        await asyncio.sleep(0.1)  # into the rule (its limit is 1 s)
        os.kill(pid, signal.SIGSEGV)

    killer = asyncio.create_task(kill_the_busy_worker())
    verdict = await judge(sandbox, [{"name": "worst", "cel": {"expression": WORST_CEL, "scope": "plan"}}])
    await killer
    assert verdict.result == "Denied"
    assert errors(verdict) == ["rule worst of policy team-a/p stopped the policy evaluator (signal SIGSEGV)"]


async def test_one_namespace_cannot_hold_every_worker() -> None:
    box = PolicySandbox(Limits(rule_seconds=3.0, cpu_seconds=10, plan_seconds=10.0, workers=2, per_namespace=1))
    worst = [{"name": "worst", "cel": {"expression": WORST_CEL, "scope": "plan"}}]
    try:
        await judge(box, NORMAL, namespace="team-b")
        while len(box._idle) < 2:  # the pool is warm: both workers running
            await asyncio.sleep(0.05)
        baseline = []
        for _ in range(3):
            started = time.monotonic()
            await judge(box, NORMAL, namespace="team-b")
            baseline.append(time.monotonic() - started)
        # Team A: five plans at once, each meeting the worst rule (3 s each): 15 s of work for its workers.
        hostile = [asyncio.create_task(judge(box, worst, namespace="team-a", name=f"w{i}")) for i in range(5)]
        await asyncio.sleep(0.5)
        during = []
        for _ in range(3):
            started = time.monotonic()
            verdict = await judge(box, NORMAL, namespace="team-b")
            during.append(time.monotonic() - started)
            assert errors(verdict) == [None]
        assert not any(task.done() for task in hostile)  # team A is still at it
        # Team B's decisions: a free worker every time, so its baseline plus noise, far below one hostile rule.
        assert max(during) < max(baseline) + 0.5, (baseline, during)
        for verdict in await asyncio.gather(*hostile):
            assert verdict.result == "Denied" and "exceeded the 3 s evaluation limit" in str(errors(verdict))
    finally:
        await box.close()


async def test_the_event_loop_keeps_running_while_a_rule_does(sandbox: PolicySandbox) -> None:
    """What starved the leader's Lease renewal: cel-rust holds the GIL for a whole evaluation."""
    await judge(sandbox, NORMAL)
    gaps: list[float] = []

    async def tick() -> None:
        last = time.monotonic()
        while True:
            await asyncio.sleep(0.01)
            now = time.monotonic()
            gaps.append(now - last)
            last = now

    ticker = asyncio.create_task(tick())
    await judge(sandbox, [{"name": "worst", "cel": {"expression": WORST_CEL, "scope": "plan"}}])
    ticker.cancel()
    assert len(gaps) > 20 and max(gaps) < 0.25, max(gaps)


async def test_a_rule_sees_none_of_the_controllers_environment(
    sandbox: PolicySandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV_PROBE, "s3cr3t-of-the-controllers")
    rules = [{"name": "env", "rego": {"module": ENV_PROBE_REGO}}]
    # In process (as the controllers evaluated until now) the rule reads the variable and says it.
    leaked = evaluate([policy(rules)], PLAN, plan_sum="s", drift_correction=False)
    assert "s3cr3t-of-the-controllers" in str(leaked.model_dump())
    verdict = await judge(sandbox, rules)
    assert "s3cr3t" not in str(verdict.model_dump()) and verdict.result == "Allowed"


async def test_compile_errors_name_the_rule_and_the_compiler_message(sandbox: PolicySandbox) -> None:
    broken = TerraformPlanPolicy.model_validate({"metadata": {"name": "b", "namespace": "team-a"}, "spec": {
        "enforcement": "mandatory", "rules": [
            {"name": "fine", "cel": {"expression": "plan.counts.total < 10", "scope": "plan"}},
            {"name": "bad-cel", "cel": {"expression": "change.type ==", "scope": "resource"}},
            {"name": "bad-rego", "rego": {"module": "package p\nimport rego.v1\ndeny contains x if { x := 1 "}},
            {"name": "no-package", "rego": {"module": "deny := 1"}},
            {"name": "builtin", "noDestroy": {}},
        ]}})
    found = dict(await sandbox.compile(broken))
    assert sorted(found) == ["bad-cel", "bad-rego", "no-package"]
    assert found["bad-cel"].startswith("CEL: Failed to parse expression 'change.type =='")
    assert found["bad-rego"] == "Rego: line 3:20: this is unclosed; line 1:1: this is unclosed"
    assert found["no-package"] == "Rego: the module has no package line"
    assert await sandbox.compile(policy(NORMAL)) == []


LEAKED = "hunter2-from-a-secret"
# A rule that reports a value of the plan as its finding's address: a Secret fed into an ordinary variable is in
# clear in the plan the review reads (only Terraform's own sensitive markers are applied).
LEAKING_REGO = """package burrito.leak
import rego.v1
warn contains {"msg": "x", "address": rc.change.after.data.DB_PASSWORD} if { some rc in input.resource_changes }
deny contains {"msg": "y", "address": rc.change.after.data.DB_PASSWORD} if { some rc in input.resource_changes }
deny contains {"msg": "z", "address": rc.address} if { some rc in input.resource_changes }
"""


async def test_attack_a_rego_rule_cannot_put_a_plan_value_in_status_events_or_notifications(
    sandbox: PolicySandbox,
) -> None:
    plan = parse_plan(json.dumps({"format_version": "1.2", "terraform_version": "1.11.4", "resource_changes": [
        {"address": "terraform_data.db", "mode": "managed", "type": "terraform_data", "name": "db",
         "change": {"actions": ["create"], "before": None, "after": {"data": {"DB_PASSWORD": LEAKED}}}}]}))
    policies = [policy([{"name": "leak", "rego": {"module": LEAKING_REGO}}], "mandatory", namespace="team-a")]
    verdict = await sandbox.evaluate(policies, plan, namespace="team-a", plan_sum="sha256:p", drift_correction=False)
    assert verdict.result == "Denied"
    layer = {"metadata": {"namespace": "team-a", "name": "db", "annotations": {
        ann.PLAN_SUM: "sha256:p", ann.PLAN_SUMMARY: plan.summary()}}, "status": {}}
    review = review_plan(layer, {}, policies, PlanReading(verdict, plan_facts(plan, "sha256:p", None, None)),
                         datetime.now(UTC))
    assert review.policy is not None
    due, _ = notifications_due({}, {"policy": review.policy}, layer["metadata"]["annotations"], "team-a", "db",
                               datetime.now(UTC), None)
    assert [n.event for n in due] == ["PolicyDenied"]
    shown = {"status": str(review.policy), "events": str(review.events),
             **{kind: render(kind, due[0]).decode() for kind in ("slack", "teams", "webhook")}}
    leaked = sorted(where for where, text in shown.items() if LEAKED in text)
    assert leaked == [], f"the plan's value is in {leaked}"
    # The rule's findings that name the plan's own resources are kept.
    assert [f["addresses"] for f in review.policy["denied"]] == [["terraform_data.db"]]
    assert "terraform_data.db" in shown["events"] and "terraform_data.db" in shown["slack"]
