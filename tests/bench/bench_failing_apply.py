"""Runs and attempts created by a layer whose apply always fails (issue 11 and issue 25, "Figures").

    python3 tests/bench/bench_failing_apply.py [--minutes 10] [--drift 20]

The whole product on one machine (API emulator, local kubelet running real `burrito-py runner start` with real
terraform, datastore, controllers), one auto-applied layer whose plan always succeeds and whose apply always
fails (a local-exec provisioner that exits 1), drift period 20 s, controller defaults otherwise (3 retries,
5 runs of history). Samples the layer's runs as they come and go (history deletes old ones) and prints the
plan and apply runs and attempts created, against the targets: at most one plan run per drift period; the first
apply run with its retries (plus the one re-plan a stale retry asks for at once, §5.1) and no other apply run,
however many drift plans follow (issue 25). Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT))

from burrito_py.api import annotations as ann  # noqa: E402
from tests.e2e.conftest import running_platform  # noqa: E402
from tests.e2e.faults.test_fault_failing_apply import FAILING_APPLY_TF  # noqa: E402
from tests.support.git_repos import make_repo  # noqa: E402


def main(minutes: float = 10.0, drift: float = 20.0) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="burrito-py-bench-failing-apply-"))
    repo = make_repo(tmp / "upstream")
    repo.commit({"layers/app/main.tf": FAILING_APPLY_TF}, "an apply that always fails")
    seen: dict[str, dict[str, Any]] = {}
    max_live = 0
    with running_platform(tmp / "p", tmp / "kubeconfig", drift_detection_period=timedelta(seconds=drift)) as p:
        p.create_repository("repo", repo.url)
        p.create_layer("app", "repo", "layers/app", auto_apply=True)
        started = time.monotonic()
        while time.monotonic() - started < minutes * 60:
            runs = p.runs("app")
            for run in runs:
                seen[run["metadata"]["name"]] = run
            max_live = max(max_live, sum((r.get("status") or {}).get("state") not in ("Succeeded", "Failed")
                                         for r in runs))
            time.sleep(0.5)
        elapsed = time.monotonic() - started
        state = (p.layer("app").get("status") or {}).get("state")
    plans = [r for r in seen.values() if r["spec"]["action"] == "plan"]
    applies = [r for r in seen.values() if r["spec"]["action"] == "apply"]
    sums = [(r["metadata"].get("annotations") or {}).get(ann.RUN_PLAN_SUM) for r in applies]
    stamps = sorted(r["metadata"]["annotations"][ann.RUN_CREATED_AT] for r in applies)
    plans_after = sum(1 for r in plans if stamps and r["metadata"]["annotations"][ann.RUN_CREATED_AT] > stamps[-1])

    def attempts(runs: list[dict[str, Any]]) -> int:
        return sum(len((r.get("status") or {}).get("attempts") or ()) for r in runs)

    periods = elapsed / drift
    print(f"{elapsed:.0f} s, drift period {drift:.0f} s ({periods:.1f} periods); final state {state}")
    print(f"plan runs:  {len(plans):4d}  attempts {attempts(plans):4d}  (target <= {int(periods) + 1} runs)")
    print(f"apply runs: {len(applies):4d}  attempts {attempts(applies):4d}  distinct plan sums {len(set(sums))} "
          f"(target: the first apply and its retries, plus a stale retry's re-plan; 0 more)")
    print(f"plan runs after the last apply run: {plans_after} (drift checks go on; none of them applied)")
    print(f"most live runs at once: {max_live}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0, help="how long to run (default 10)")
    parser.add_argument("--drift", type=float, default=20.0, help="drift period in seconds (default 20)")
    args = parser.parse_args()
    main(args.minutes, args.drift)
