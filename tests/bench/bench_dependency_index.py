"""Dependencies (issue 14): the controllers' cost of the dependency index at 10,000 layers with 3 dependencies
each. Memory of the index (tracemalloc, the layer bodies excluded), the time to observe every layer (building
the index), and the time to enqueue the dependents of one upstream on a status change (the store's on_change
with the real wake_related, against a real Context whose scheduler counts what it is asked)."""

from __future__ import annotations

import functools
import random
import statistics
import sys
import time
import tracemalloc
from typing import Any

from burrito_py.controllers.context import Context
from burrito_py.controllers.layer.dependencies import wake_related
from burrito_py.controllers.settings import ControllerSettings
from burrito_py.kube.client import Kube
from burrito_py.kube.inventory import Store

LAYERS = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
DEPENDENCIES = 3
NAMESPACES = 10


def layer(index: int, upstreams: list[int]) -> dict[str, Any]:
    return {"metadata": {"name": f"layer-{index}", "namespace": f"team-{index % NAMESPACES}",
                         "resourceVersion": str(index + 1), "uid": f"uid-{index}"},
            "spec": {"repository": {"name": "infra"}, "branch": "main", "path": f"layers/{index}",
                     "dependsOn": [{"name": f"layer-{u}", "namespace": f"team-{u % NAMESPACES}",
                                    "inputs": {f"in_{u}": "id"}} for u in upstreams]},
            "status": {"state": "Idle", "appliedRevision": "c1"}}


def held(store: Store, bodies: list[dict[str, Any]]) -> tuple[int, float]:
    """(bytes allocated, seconds) to observe every body into `store`."""
    tracemalloc.start()
    started = time.perf_counter()
    for body in bodies:
        store.observe(body)
    seconds = time.perf_counter() - started
    size, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return size, seconds


class CountingScheduler:
    def __init__(self) -> None:
        self.scheduled = 0

    def schedule(self, key: tuple[str, str], after: float) -> None:
        self.scheduled += 1


def main() -> None:
    rng = random.Random(14)
    # Each layer depends on 3 earlier ones (a DAG); a few "hub" upstreams (the first 10) are named often.
    bodies = [layer(i, sorted(rng.sample(range(min(i, 10)) if i < 100 else
                                         [*rng.sample(range(10), 1), *rng.sample(range(10, i), 2)],
                                         min(i, DEPENDENCIES)))) for i in range(LAYERS)]
    # The controllers' own Context, wired as the operator wires it: its layer store calls
    # dependencies.wake_related on every observe (a no-op wake until primed, as at start-up), and its scheduler
    # is replaced by one that counts.
    ctx = Context(ControllerSettings(), Kube(None))  # type: ignore[arg-type]  # no request is ever made here
    ctx.inventory.layers.on_change = functools.partial(wake_related, ctx)
    plain_bytes, plain_seconds = held(Store(), bodies)
    index_bytes, built = held(ctx.inventory.layers, bodies)
    store = ctx.inventory.layers
    scheduler = CountingScheduler()
    ctx.layers = scheduler  # type: ignore[assignment]
    ctx.primed = True
    timings: dict[str, list[float]] = {"hub": [], "leaf": []}
    for kind, index in (("hub", 3), ("leaf", LAYERS - 1)):
        for round_ in range(50):
            body = dict(bodies[index], metadata={**bodies[index]["metadata"],
                                                 "resourceVersion": str(LAYERS + 100 * index + round_ + 1)},
                        status={"state": "Running" if round_ % 2 else "Idle", "appliedRevision": "c1"})
            started = time.perf_counter()
            store.observe(body)
            timings[kind].append(time.perf_counter() - started)
    hub = ("team-3", "layer-3")
    print(f"layers: {LAYERS}, {DEPENDENCIES} dependencies each (hub layer-3 has {len(store.dependents_of(hub))} "
          "dependents)")
    print(f"memory: plain store {plain_bytes / 1e6:.1f} MB, with the index {index_bytes / 1e6:.1f} MB: "
          f"the index costs {(index_bytes - plain_bytes) / 1e6:.1f} MB")
    print(f"observing every layer: {plain_seconds:.2f} s plain, {built:.2f} s with the index and on_change")
    for kind, values in timings.items():
        print(f"status change of a {kind}: median {statistics.median(values) * 1e3:.3f} ms, "
              f"max {max(values) * 1e3:.3f} ms")
    print(f"dependents enqueued: {scheduler.scheduled}")


if __name__ == "__main__":
    main()
