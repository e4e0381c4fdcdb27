"""What a posted state costs the datastore (docs/architecture.md §10.6, §10.7): tenant code in a managed-state layer's
runner posts, with its TF_HTTP_PASSWORD, a near-limit state of many empty resources. `json.loads` of it on the event
loop cost ~26 times its size and stalled every request meanwhile; one such POST at the chart's default limit took the
one datastore replica past its memory limit (every namespace's plans, states and sources with it)."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import httpx

from burrito_py.datastore.in_process import running_datastore
from tests.support.datastore_process import RssSampler, datastore_process, rss_bytes

MiB = 1024 * 1024
LIMIT = 8 * MiB
APP = "/api/v1/layers/default/app/state"
STATE_BODIES = 4  # posted states' worth of MAX_STATE_BYTES a replica holds at once (§10.7)


def empty_resources(size: int, serial: int = 1) -> tuple[bytes, int]:
    """A state of `size` bytes whose resources are all `{}`, and how many there are."""
    head, tail = b'{"serial":%d,"lineage":"L","resources":[' % serial, b"]}"
    count = (size - len(head) - len(tail) + 1) // 3
    return head + b",".join([b"{}"] * count) + tail, count


def test_attack_a_near_limit_state_of_empty_resources_costs_bounded_memory_and_stalls_nothing(tmp_path: Path) -> None:
    body, count = empty_resources(LIMIT - 1024)
    with datastore_process(tmp_path / "data",
                           env={"BURRITO_PY_DATASTORE_MAX_STATE_BYTES": str(LIMIT)}) as datastore:
        assert httpx.get(f"{datastore.url}/healthz").status_code == 200
        idle = rss_bytes(datastore.pid)
        latencies: list[float] = []
        posting = threading.Event()

        def probe() -> None:
            with httpx.Client(timeout=120) as client:
                while posting.is_set():
                    started = time.monotonic()
                    client.get(f"{datastore.url}/healthz")
                    latencies.append(time.monotonic() - started)
                    time.sleep(0.05)

        posting.set()
        prober = threading.Thread(target=probe, daemon=True)
        with RssSampler(datastore.pid) as rss:
            prober.start()
            answer = httpx.post(f"{datastore.url}{APP}", content=body, timeout=300)
            posting.clear()
            prober.join(120)
        growth, size = rss.peak - idle, len(body)
        print(f"{len(body) / MiB:.1f} MiB state of {count} empty resources: RSS +{growth / MiB:.1f} MiB; "
              f"/healthz worst {max(latencies) * 1000:.0f} ms over {len(latencies)} probes")
        assert answer.status_code == 200, answer.text
        assert answer.json()["serial"] == 1
        record = httpx.get(f"{datastore.url}{APP}/versions").json()[-1]
        assert (record["resources"], record["size"]) == (count, size)
        # Held once (and handed to storage a chunk at a time), never built as a document: json.loads cost ~26 times.
        assert growth < 3 * size, f"RSS grew by {growth / MiB:.1f} MiB for a {size / MiB:.1f} MiB state"
        assert latencies and max(latencies) < 3.0, f"/healthz waited {max(latencies):.1f} s while the state was parsed"


def test_attack_one_namespaces_slow_states_never_take_anothers_room(tmp_path: Path) -> None:
    """Tenant code in one namespace opens near-limit state POSTs and sends nothing more (each held by the replica
    up to its read timeout): they took the replica's whole room, and every other namespace's state POST was a 503,
    an apply's state lost. A namespace holds at most one limit's worth: another namespace posts at once, and the
    same namespace's next POST waits its turn, then is stored."""
    limit = 64 * 1024
    with running_datastore(tmp_path / "data", max_state_bytes=limit) as url:
        host, port = url.removeprefix("http://").split(":")
        head = (f"POST {APP} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                f"Content-Length: {limit}\r\n\r\n").encode()
        holders = [socket.create_connection((host, int(port))) for _ in range(STATE_BODIES)]
        try:
            for holder in holders:
                holder.sendall(head + b'{"serial": 1')  # and then nothing, for now
            time.sleep(0.5)
            other = httpx.post(f"{url}{APP.replace('/default/', '/team-b/')}", content=empty_resources(limit // 2)[0],
                               timeout=10)
            assert other.status_code == 200, other.text
            waited: list[httpx.Response] = []
            same = threading.Thread(target=lambda: waited.append(httpx.post(
                f"{url}{APP.replace('/app/', '/db/')}", content=empty_resources(limit // 2)[0], timeout=60)))
            same.start()
            time.sleep(1.0)
            assert not waited, "the same namespace's next POST waits while its room is held"
        finally:
            for holder in holders:
                holder.close()
        same.join(60)
        assert waited and waited[0].status_code == 200, waited[0].text if waited else "no answer"
