"""Emulator figures (issue: foundation): start-up time and sustained writes with one watcher attached.

Run: python3 tests/bench/bench_apiserver.py — prints figures (targets: start-up < 50 ms, >= 500 writes/s).
"""

from __future__ import annotations

import statistics
import threading
import time

import httpx

from burrito_py.local.apiserver import ApiServer

CONFIGMAPS = "/api/v1/namespaces/default/configmaps"


def startup_ms(samples: int = 15) -> list[float]:
    times = []
    for _ in range(samples):
        started = time.perf_counter()
        server = ApiServer().start()
        times.append((time.perf_counter() - started) * 1000)
        server.stop()
    return times


def writes_per_second(rounds: int = 3, per_round: int = 500) -> tuple[list[float], int]:
    server = ApiServer().start()
    seen = [0]
    watching = threading.Event()

    def watch() -> None:
        with httpx.stream("GET", server.url + CONFIGMAPS, params={"watch": "true"}, timeout=60) as response:
            watching.set()
            for line in response.iter_lines():
                if line:
                    seen[0] += 1

    threading.Thread(target=watch, daemon=True).start()
    watching.wait(5)
    rates = []
    with httpx.Client(base_url=server.url) as http:
        for round_ in range(rounds):
            started = time.perf_counter()
            for i in range(per_round):
                http.post(CONFIGMAPS, json={"metadata": {"name": f"c{round_}-{i}"}, "data": {"k": "v"}})
            rates.append(per_round / (time.perf_counter() - started))
    time.sleep(0.2)
    server.stop()
    return rates, seen[0]


def main() -> None:
    starts = startup_ms()
    print(f"emulator start-up: median {statistics.median(starts):.2f} ms over {len(starts)} starts (target < 50 ms)")
    rates, seen = writes_per_second()
    print(f"creates/s from one client with one watcher: median {statistics.median(rates):.0f} "
          f"(rounds: {', '.join(f'{r:.0f}' for r in rates)}; watcher received {seen} events) (target >= 500/s)")


if __name__ == "__main__":
    main()
