"""Comment commands (issue 30): a signed `/burrito-py plan` comment → its acknowledgement (the reply reaching a
fake GitHub) and → the new plan run created, p50/p99 over COMMANDS comments on one pull request, with the e2e
harness (emulator, kubelet, datastore, controllers, server, real terraform). Asserts nothing: prints figures."""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

from burrito_py.api import annotations as ann
from tests.e2e.conftest import layer_code
from tests.e2e.test_pull_request_commands import comment
from tests.e2e.test_pull_requests import pr_runs, pull_request_world
from tests.support.git_repos import make_repo

COMMANDS = int(sys.argv[1]) if len(sys.argv) > 1 else 20


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p * len(ordered)))]


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="bench-prcmd-") as tmp:
        repo = make_repo(Path(tmp) / "upstream")
        repo.commit({"layers/app/main.tf": layer_code("v1"), "layers/other/main.tf": layer_code("other")}, "layers")
        with pull_request_world(Path(tmp), repo, "github") as world:
            world.platform.custom.patch_namespaced_custom_object(
                ann.GROUP, ann.VERSION, "default", "terraformrepositories", "infra",
                {"spec": {"pullRequests": {"commands": {"allowed": ["alice"]}}}})
            world.fake.permissions["alice"] = "write"
            head = world.push(1, {"layers/app/main.tf": layer_code("bench")}, "change app")
            world.hook("opened", 1, head)
            world.wait_pr(1, head, "Planned")
            acks, runs = [], []
            for n in range(COMMANDS):
                before = {r["metadata"]["name"] for r in pr_runs(world.platform)}
                calls = len(world.fake.calls)
                sent = comment(world, 1, "/burrito-py plan app", "alice", 9000 + n)
                acked = created = None
                deadline = time.monotonic() + 60
                while acked is None or created is None:
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"command {n}: no reply or no run")
                    if acked is None:
                        acked = next((world.fake.times[i] for i in range(calls, len(world.fake.calls))
                                      if world.fake.calls[i][0] == "POST"
                                      and world.fake.calls[i][1].endswith("/comments")), None)
                    if created is None and {r["metadata"]["name"] for r in pr_runs(world.platform)} - before:
                        created = time.monotonic()
                    time.sleep(0.005)
                acks.append(acked - sent)
                runs.append(created - sent)
                world.wait_pr(1, head, "Planned")
    print(f"comment command -> acknowledgement (reply at the provider), {COMMANDS} commands: "
          f"p50 {statistics.median(acks):.3f} s, p99 {percentile(acks, 0.99):.3f} s")
    print(f"comment command -> plan run created: p50 {statistics.median(runs):.3f} s, "
          f"p99 {percentile(runs, 0.99):.3f} s (run seen by polling the API every 5 ms)")


if __name__ == "__main__":
    main()
