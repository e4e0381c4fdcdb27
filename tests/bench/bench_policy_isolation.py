"""Issue 24 figures for bounded policy evaluation (docs/architecture.md §5.9), with the default limits (2 s per
rule, 10 s per plan, 2 workers, 1 per namespace):

1. the sandbox's cost per evaluation of a normal policy (the process hop: the plan pickled to a worker, the
   answer read back), against the same evaluation in process, on plans of 20 and 1,000 changes;
2. the controllers' decision latency for team-b's layers (a new plan to its reviewed status) alone, and while
   team-a's layers meet its worst allowed policy (a 10^8-step CEL comprehension and a looping Rego rule): real
   controllers with leader election, the emulator and a datastore, as tests/integration/controllers/
   test_plan_policy_isolation.py. Also the largest gap between two renewals of the leader's Lease.

Prints medians; asserts nothing. Run: python3 -m tests.bench.bench_policy_isolation [SAMPLES]
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from burrito_py.api.policy import TerraformPlanPolicy
from burrito_py.plans.model import parse_plan
from burrito_py.policy.evaluate import evaluate
from burrito_py.policy.sandbox import PolicySandbox
from tests.integration.controllers.test_plan_policy_isolation import NORMAL_RULES, LeaseWatch, running_world
from tests.unit.plans.plan_fixtures import generated_plan
from tests.unit.policy.hostile import worst_rules


def _ms(samples: list[float]) -> str:
    ordered = sorted(samples)
    return f"median {statistics.median(ordered) * 1000:7.1f} ms, max {ordered[-1] * 1000:7.1f} ms"


async def hop_cost(samples: int) -> None:
    box = PolicySandbox()
    try:
        for changes in (20, 1000):
            plan = parse_plan(json.dumps(generated_plan(changes)).encode())
            for label, rules in (("CEL", NORMAL_RULES[:1]), ("Rego", NORMAL_RULES[1:])):
                policy = TerraformPlanPolicy.model_validate({"metadata": {"name": "p", "namespace": "b"},
                                                             "spec": {"enforcement": "mandatory", "rules": rules}})
                here, there = [], []
                await box.evaluate([policy], plan, namespace="b", plan_sum="s", drift_correction=False)  # warm
                for _ in range(samples):
                    started = time.perf_counter()
                    evaluate([policy], plan, plan_sum="s", drift_correction=False)
                    here.append(time.perf_counter() - started)
                    started = time.perf_counter()
                    await box.evaluate([policy], plan, namespace="b", plan_sum="s", drift_correction=False)
                    there.append(time.perf_counter() - started)
                extra = statistics.median(there) - statistics.median(here)
                print(f"{label:>4} rule, {changes:>5} changes: in process {statistics.median(here) * 1000:7.1f} ms, "
                      f"sandbox {statistics.median(there) * 1000:7.1f} ms: +{extra * 1000:.1f} ms per evaluation "
                      f"(medians of {samples})")
    finally:
        await box.close()


def decision_latency(samples: int) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="burrito-py-bench-policy-"))
    with running_world(tmp, leader_timing=None) as world:
        world.policy("team-b", "normal", NORMAL_RULES)
        world.policy("team-a", "worst", worst_rules())
        world.decision_seconds("team-b", "warm-up", 120)
        alone = [world.decision_seconds("team-b", f"alone-{i}", 60) for i in range(samples)]
        with LeaseWatch(world.http) as lease:
            # Enough of team-a's plans to keep its worker busy for the whole measurement (4 s each).
            for i in range(samples + 4):
                world.planned_layer("team-a", f"worst-{i}")
            time.sleep(1.0)
            during = [world.decision_seconds("team-b", f"during-{i}", 60) for i in range(samples)]
            busy = sum(1 for i in range(samples + 4) if not world.decided(
                "team-a", f"worst-{i}", world.sum_of("team-a", f"worst-{i}")))
        print(f"team-b decision, alone:                  {_ms(alone)} ({samples} layers)")
        print(f"team-b decision, team-a's worst policy:  {_ms(during)} ({samples} layers; "
              f"{busy} of team-a's plans still queued at the end)")
        print(f"leader Lease renewals (retry 2 s): largest gap {max(lease.gaps()):.2f} s over {len(lease.renewals)}")


def main(samples: int = 10) -> None:
    print("(a shared 2-core machine: figures vary with the other work on it)")
    asyncio.run(hop_cost(samples))
    decision_latency(samples)


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:2]))
