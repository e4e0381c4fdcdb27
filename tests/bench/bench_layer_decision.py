"""Cost of the layer decision (issue: core loop; target <= 50 us per layer): snapshot + decide_layer,
as every layer reconcile does, on a realistic idle layer with five runs."""

from __future__ import annotations

import statistics
import time
from datetime import UTC, datetime, timedelta

from burrito_py.api import annotations as ann
from burrito_py.controllers.layer.actions import snapshot
from burrito_py.controllers.layer.decide import decide_layer
from burrito_py.timeutil import format_time

NOW = datetime.now(UTC)
LAYER = {
    "metadata": {
        "name": "app",
        "namespace": "default",
        "annotations": {
            ann.BRANCH_COMMIT: "c" * 40,
            ann.RELEVANT_COMMIT: "c" * 40,
            ann.RELEVANT_COMMIT_DATE: format_time(NOW),
            ann.PLAN_SUM: "sha256:" + "a" * 64,
            ann.APPLY_SUM: "sha256:" + "a" * 64,
            ann.PLAN_COMMIT: "c" * 40,
            ann.PLAN_DATE: format_time(NOW),
            ann.PLAN_RUN: "app-plan-x/1",
            ann.PLAN_SUMMARY: "Plan: 1 to add, 0 to change, 0 to destroy",
        },
    }
}
RUNS = [
    {
        "metadata": {"name": f"app-{i}", "creationTimestamp": format_time(NOW)},
        "spec": {"action": "plan" if i % 2 else "apply", "layer": {"revision": "c" * 40}},
        "status": {"state": "Succeeded", "conditions": []},
    }
    for i in range(5)
]


def main() -> None:
    samples = []
    for _ in range(7):
        n = 20000
        started = time.perf_counter()
        for _ in range(n):
            decide_layer(snapshot(LAYER, RUNS, False, timedelta(minutes=20)), NOW)
        samples.append((time.perf_counter() - started) / n * 1e6)
    print(
        f"layer decision (snapshot + decide): median {statistics.median(samples):.1f} us per layer "
        f"over {len(samples)} x 20000 (target <= 50 us)"
    )


if __name__ == "__main__":
    main()
