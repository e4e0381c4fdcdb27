"""Pull requests (issue 15): a signed pull request webhook → the first comment or status write at a fake GitHub
("planning…"), over PUSHES pushes to one pull request, and the provider API calls per update (target ≤ 3, and 0
when nothing changed), with the e2e harness (emulator, kubelet, datastore, controllers, server, real terraform)."""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

from tests.e2e.conftest import layer_code
from tests.e2e.test_pull_requests import calls_per_update, first_write, pull_request_world
from tests.support.git_repos import make_repo

PUSHES = int(sys.argv[1]) if len(sys.argv) > 1 else 20


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="bench-pr-") as tmp:
        repo = make_repo(Path(tmp) / "upstream")
        repo.commit({"layers/app/main.tf": layer_code("v1"), "layers/other/main.tf": layer_code("other")}, "layers")
        with pull_request_world(Path(tmp), repo, "github") as world:
            before = calls_per_update()
            latencies, settled = [], []
            for n in range(PUSHES):
                head = world.push(1, {"layers/app/main.tf": layer_code(f"bench {n}")}, f"push {n}")
                calls = len(world.fake.calls)
                sent = world.hook("opened" if n == 0 else "synchronize", 1, head)
                deadline = time.monotonic() + 60
                while not any(method != "GET" for method, _ in world.fake.calls[calls:]):
                    if time.monotonic() > deadline:
                        raise TimeoutError("no write reached the provider")
                    time.sleep(0.005)
                latencies.append(first_write(world.fake, calls) - sent)
                world.wait_pr(1, head, "Planned")
                settled.append(time.monotonic() - sent)
            updates, within, silent = (a - b for a, b in zip(calls_per_update(), before, strict=True))
    latencies.sort()
    print(f"pull request webhook -> first provider write ('planning…'), {PUSHES} pushes: "
          f"p50 {statistics.median(latencies):.3f} s, p95 {latencies[int(0.95 * (len(latencies) - 1))]:.3f} s "
          f"(target p50 <= 2 s)")
    print(f"webhook -> pull request Planned (plan run done, comment and statuses sent): "
          f"p50 {statistics.median(settled):.2f} s")
    print(f"provider API calls per update: {updates:.0f} updates, {within:.0f} with <= 3 calls, "
          f"{silent:.0f} with none (body and statuses unchanged)")


if __name__ == "__main__":
    main()
