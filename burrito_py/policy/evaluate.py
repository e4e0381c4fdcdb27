"""The verdict of the selected policies on one plan (pure, but for the CEL and Rego engines it calls)."""

from __future__ import annotations

from collections.abc import Sequence

from burrito_py.api.policy import ClusterTerraformPlanPolicy, PlanPolicyRule, TerraformPlanPolicy
from burrito_py.plans.model import PlanModel
from burrito_py.policy.builtin import builtin_violations
from burrito_py.policy.cel_rules import CelRuleError, cel_violations
from burrito_py.policy.rego_rules import RegoRuleError, rego_findings
from burrito_py.policy.verdict import RuleResult, Verdict, rule_result

__all__ = ["evaluate", "evaluate_rule", "plan_addresses", "policy_name"]

Policy = TerraformPlanPolicy | ClusterTerraformPlanPolicy


def policy_name(policy: Policy) -> str:
    return f"{policy.namespace}/{policy.name}" if policy.namespace else policy.name


def plan_addresses(plan: PlanModel) -> frozenset[str]:
    """The addresses a finding may name: the plan's own resources (changes and drift). A Rego rule reports any
    string it likes as an `address`, a value of the plan included (one fed from a Secret into an ordinary variable
    is in clear there), and addresses reach the status, events and notifications."""
    return frozenset(rc.address for rc in (*plan.resource_changes, *plan.resource_drift))


def evaluate_rule(policy: Policy, rule: PlanPolicyRule, plan: PlanModel, drift_correction: bool) -> list[RuleResult]:
    """What one rule finds: nothing, a deny or warn (the rule's action), or an error (which denies)."""
    name, kind, level = policy_name(policy), policy.KIND, policy.spec.enforcement
    try:
        if rule.rego is not None:
            found = rego_findings(rule.rego.module, plan, drift_correction)
            known = plan_addresses(plan)
            results = []
            for outcome in ("deny", "warn"):
                entries = found[outcome]
                if entries:
                    action = "warn" if outcome == "warn" else rule.action
                    results.append(rule_result(name, kind, rule.name, level, action,
                                               [a for _, a in entries if a in known], [m for m, _ in entries]))
            return results
        if rule.cel is not None:
            addresses, messages = cel_violations(rule.cel, plan, drift_correction)
        else:
            addresses, messages = builtin_violations(rule, plan, drift_correction)
    except (CelRuleError, RegoRuleError) as exc:
        return [rule_result(name, kind, rule.name, level, "error", [], [f"rule {rule.name}: {exc}"])]
    if not addresses and not messages:
        return []
    return [rule_result(name, kind, rule.name, level, rule.action, addresses, messages)]


def evaluate(policies: Sequence[Policy], plan: PlanModel, *, plan_sum: str, drift_correction: bool) -> Verdict:
    results = [r for policy in policies for rule in policy.spec.rules
               for r in evaluate_rule(policy, rule, plan, drift_correction)]
    return Verdict.of(plan_sum, results)
