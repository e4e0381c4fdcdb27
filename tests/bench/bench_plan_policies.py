"""Issue 13 figures: reading a 1,000-change plan into the plan model, and judging it with the built-in rules,
with CEL and with Rego (targets: built-in <= 50 ms, Rego <= 200 ms). Medians of 20 runs; the same policy in
each language (no destroy, no IAM, at most 2,000 changes)."""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from typing import Any

from burrito_py.api.policy import TerraformPlanPolicy
from burrito_py.plans.model import parse_plan
from burrito_py.policy.evaluate import evaluate
from tests.unit.plans.plan_fixtures import generated_plan

RULES: dict[str, list[dict[str, Any]]] = {
    "built-in": [{"name": "no-destroy", "noDestroy": {}}, {"name": "no-iam", "denyTypes": ["aws_iam_*"]},
                 {"name": "blast", "maxChanges": {"total": 2000}}],
    "CEL": [{"name": "no-destroy", "cel": {"expression": "!('delete' in change.actions)"}},
            {"name": "no-iam", "cel": {"expression": "!change.type.startsWith('aws_iam_')"}},
            {"name": "blast", "cel": {"expression": "plan.counts.total <= 2000", "scope": "plan"}}],
    "Rego": [{"name": "conftest", "rego": {"module": """package bench
import rego.v1
deny contains {"msg": "destroy", "address": rc.address} if {
  some rc in input.resource_changes
  "delete" in rc.change.actions
}
deny contains {"msg": "iam", "address": rc.address} if {
  some rc in input.resource_changes
  startswith(rc.type, "aws_iam_")
}
deny contains "blast" if { count(input.resource_changes) > 2000 }
"""}}],
    # The usual case: a policy that finds little (here 0 of 1,000), so the time is reading the plan in.
    "Rego, few findings": [{"name": "conftest", "rego": {"module": """package bench
import rego.v1
deny contains sprintf("%s: a bucket must not be public", [rc.address]) if {
  some rc in input.resource_changes
  rc.type == "aws_s3_bucket"
  rc.change.after.acl == "public-read"
}
"""}}],
}


def median_ms(action: Callable[[], object], runs: int = 20) -> float:
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        action()
        samples.append((time.perf_counter() - started) * 1000)
    return statistics.median(samples)


def main() -> None:
    raw = json.dumps(generated_plan(1000)).encode()
    print(f"plan JSON: 1,000 changes, {len(raw) / 1024:.0f} KiB")
    print(f"parse into the plan model: {median_ms(lambda: parse_plan(raw)):.1f} ms (median of 20)")
    plan = parse_plan(raw)
    for language, rules in RULES.items():
        policy = TerraformPlanPolicy.model_validate({"metadata": {"name": "p", "namespace": "default"},
                                                     "spec": {"enforcement": "gateAutoApply", "rules": rules}})
        verdict = evaluate([policy], plan, plan_sum="s", drift_correction=False)
        denied = sorted({a for r in verdict.results for a in r.addresses})
        ms = median_ms(lambda p=policy: evaluate([p], plan, plan_sum="s", drift_correction=False))  # type: ignore[misc]
        print(f"{language:>18}: {ms:6.1f} ms (median of 20); verdict {verdict.result}, "
              f"{sum(r.count for r in verdict.results)} findings ({len(denied)} addresses kept)")


if __name__ == "__main__":
    main()
