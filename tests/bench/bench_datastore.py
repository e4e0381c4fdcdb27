"""The datastore's cost over S3, its latency under concurrency and its memory on a large plan, auth on.

    python3 -m tests.bench.bench_datastore [--rounds N] [--mib M] [--clients 1,10,50,200] [--skip PARTS]
        [--pairs N] [--base CHECKOUT]

Processes: moto's standalone S3 server, the API emulator (in this process) reviewing the datastore's tokens,
`burrito-py datastore start` with auth on (S3 backend on moto, then the filesystem backend), and this client.
Every request carries the controllers' service-account token. Figures (medians over the rounds), measured side
by side in one run:
- upload and download throughput of a 50 MiB plan, file to file, through the datastore (DatastoreClient)
  and with boto3 directly against the same moto server (its managed transfer, upload_file/download_file,
  and a single put_object/get_object stream), interleaved, and the ratios (issue 31's target >= 0.9 against
  upload_file, put_object and the get_object stream), with the CPU seconds the datastore process and this client
  spent per transfer (figures a busy machine barely moves, where MiB/s swing with its load); with --base, the
  datastore of another checkout in the same rounds; and the same datastore through the runner's client
  (RunnerStore): the runner uploads every plan and downloads every apply's plan and source, so it is the client of
  large transfers. Both download through httpclient.py (http.client, reading a response 1 MiB at a time, where
  httpx's transport reads 64 KiB); DatastoreClient uploads with httpx;
- requests per second and p50/p99 latency of GET plan (100 KiB, latest attempt) at 1, 10, 50 and 200
  concurrent clients, S3 and filesystem backends (issue 31's target at 50 clients: p99 <= 200 ms on S3,
  <= 100 ms on the filesystem), for this checkout's datastore with its read cache on (docs/architecture.md §10.8:
  hits, and one miss per TTL) and off (every GET a cold read: the listing and the object from storage), and with
  --base the datastore of another checkout (e.g. main's, its code first on the path), in turns at each level
  (--pairs turns each, medians); any answer other than 200 (e.g. a 503 shed under overload) is counted; with
  the same load generator, two floors: boto3 straight to moto (what S3 on this machine does) and the same body as
  a static file from Go's net/http (tests/bench/static_server; what this machine and client do at all);
- the same put_object/get_object through a streaming reverse proxy in Go (tests/bench/static_server): what one
  more hop costs on this machine when the hop is native;
- the datastore's peak RSS over a 200 MiB upload + download, both backends.
Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import aiohttp
import httpx
from burrito_local.identity import ensure_service_account, request_token

from burrito_py.datastore.client import DatastoreClient
from burrito_py.datastore.in_process import free_port
from burrito_py.datastore.s3 import make_client
from burrito_py.runner.store import RunnerStore
from tests.bench.static_server import running_reverse_proxy, running_static_server
from tests.support.datastore_process import RssSampler, datastore_process, rss_bytes
from tests.support.emulator import running_apiserver

MiB = 1024 * 1024
PLAN_100K = b"{" + b" " * (100 * 1024 - 2) + b"}"
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench", "AWS_DEFAULT_REGION": "us-east-1"}
CONTROLLERS = ("burrito-py", "burrito-py-controllers")
CACHED = "read cache on (hits; a miss per 5 s TTL)"  # the chart's default admin of the datastore


@contextmanager
def moto_server() -> Iterator[str]:
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(url, timeout=1)
                break
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    raise RuntimeError("moto server did not start") from None
                time.sleep(0.05)
        yield url
    finally:
        process.terminate()
        process.wait(30)


def write_plan(path: Path, mib: int) -> None:
    with path.open("wb") as handle:
        for i in range(mib):
            handle.write(hashlib.sha256(str(i).encode()).digest() * (MiB // 32))


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of `pid` so far, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def throughput(rounds: int, mib: int, s3: Any, bucket: str, url: str, token: str, work: Path, pid: int,
               base: tuple[str, int] | None = None) -> None:
    """`base`: (URL, pid) of another checkout's datastore, measured in the same rounds."""
    plan, out = work / "plan.bin", work / "out.bin"
    write_plan(plan, mib)
    figures: dict[str, list[float]] = {k: [] for k in
                                       ("ds_up", "ds_down", "rs_up", "rs_down", "tx_up", "tx_down", "obj_up",
                                        "obj_down", "px_up", "px_down", "base_up", "base_down")}
    cpu: dict[str, list[tuple[float, float]]] = {}  # per transfer: (the datastore's, this client's) CPU seconds

    def timed(key: str, call: Any, server_pid: int = pid) -> None:
        server, client = cpu_seconds(server_pid), time.process_time()
        started = time.perf_counter()
        call()
        figures[key].append(mib / (time.perf_counter() - started))
        cpu.setdefault(key, []).append((cpu_seconds(server_pid) - server, time.process_time() - client))

    def get_object(client: Any = s3) -> None:
        body = client.get_object(Bucket=bucket, Key="direct/obj.bin")["Body"]
        with out.open("wb") as handle:
            for chunk in body.iter_chunks(MiB):
                handle.write(chunk)

    def put_object(client: Any = s3) -> None:
        with plan.open("rb") as handle:
            client.put_object(Bucket=bucket, Key="direct/obj.bin", Body=handle)

    # The floor of any service between the client and S3: the same put_object/get_object through a streaming
    # reverse proxy in Go (one more hop and nothing else).
    with DatastoreClient(url, token=token, timeout=300) as client, RunnerStore(url, token, timeout=300) as runner, \
            DatastoreClient(base[0] if base else url, token=token, timeout=300) as before, \
            running_reverse_proxy(s3.meta.endpoint_url) as proxy_url:
        proxied = make_client(endpoint_url=proxy_url, path_style=True, boto3_checksums=True) if proxy_url else None
        for i in range(rounds):  # interleaved, so a busy moment of the machine hits every variant alike
            timed("ds_up", lambda i=i: client.put_plan("default", "bench", f"bench-plan-{i}", 1, "bin", plan))
            timed("ds_down", lambda i=i: client.download_plan("default", "bench", f"bench-plan-{i}", 1, "bin", out))
            timed("rs_up", lambda i=i: runner.put_plan("default", "bench", f"runner-plan-{i}", 1, "bin", plan))
            timed("rs_down", lambda i=i: runner.download_plan("default", "bench", f"runner-plan-{i}", 1, "bin", out))
            if base is not None:
                timed("base_up", lambda i=i: before.put_plan("default", "bench", f"base-plan-{i}", 1, "bin", plan),
                      base[1])
                timed("base_down", lambda i=i: before.download_plan("default", "bench", f"base-plan-{i}", 1, "bin",
                                                                    out), base[1])
            timed("tx_up", lambda: s3.upload_file(str(plan), bucket, "direct/plan.bin"))
            timed("tx_down", lambda: s3.download_file(bucket, "direct/plan.bin", str(out)))
            timed("obj_up", put_object)
            timed("obj_down", get_object)
            if proxied is not None:
                timed("px_up", lambda: put_object(proxied))
                timed("px_down", lambda: get_object(proxied))
    med = {k: statistics.median(v) for k, v in figures.items() if v}
    print(f"{mib} MiB plan, median of {rounds} rounds (MiB/s; ratio target >= 0.9):")
    print(f"  upload:   datastore {med['ds_up']:7.1f}   boto3 upload_file {med['tx_up']:7.1f}   "
          f"boto3 put_object {med['obj_up']:7.1f}   ratio {med['ds_up'] / med['tx_up']:.2f} / "
          f"{med['ds_up'] / med['obj_up']:.2f}")
    print(f"  download: datastore {med['ds_down']:7.1f}   boto3 download_file {med['tx_down']:7.1f}   "
          f"boto3 get_object {med['obj_down']:7.1f}   ratio {med['ds_down'] / med['tx_down']:.2f} / "
          f"{med['ds_down'] / med['obj_down']:.2f}")
    print(f"  the runner's client (RunnerStore, http.client): up {med['rs_up']:7.1f}   down {med['rs_down']:7.1f}   "
          f"ratio {med['rs_up'] / med['tx_up']:.2f} / {med['rs_up'] / med['obj_up']:.2f} up, "
          f"{med['rs_down'] / med['obj_down']:.2f} down")

    def spent(key: str) -> str:
        return (f"datastore {statistics.median(s for s, _ in cpu[key]):.2f} + client "
                f"{statistics.median(c for _, c in cpu[key]):.2f}")

    print(f"  CPU seconds per transfer (medians): upload {spent('ds_up')}, put_object client "
          f"{statistics.median(c for _, c in cpu['obj_up']):.2f}; download {spent('ds_down')}, get_object client "
          f"{statistics.median(c for _, c in cpu['obj_down']):.2f}; the runner's client: upload {spent('rs_up')}, "
          f"download {spent('rs_down')}")
    if "base_up" in med:
        print(f"  the base checkout's datastore: up {med['base_up']:7.1f}   down {med['base_down']:7.1f}   "
              f"ratio to boto3 {med['base_up'] / med['tx_up']:.2f} / {med['base_up'] / med['obj_up']:.2f} up, "
              f"{med['base_down'] / med['obj_down']:.2f} down; this one to it {med['ds_up'] / med['base_up']:.2f} up, "
              f"{med['ds_down'] / med['base_down']:.2f} down; CPU seconds per transfer upload {spent('base_up')}, "
              f"download {spent('base_down')}")
    if "px_up" in med:
        print(f"  the floor, put_object/get_object through a Go reverse proxy: up {med['px_up']:7.1f}   down "
              f"{med['px_down']:7.1f}   ratio to straight {med['px_up'] / med['obj_up']:.2f} / "
              f"{med['px_down'] / med['obj_down']:.2f}")
    else:
        print("  no `go` on PATH: the reverse proxy floor was not measured")


def latency(variants: list[tuple[str, str]], token: str, label: str, target_p99_ms: float, levels: list[int],
            pairs: int) -> None:
    """Requests per second and p50/p99 of GET plan (100 KiB, the run's latest attempt: a listing, then the object)
    at each level of concurrent clients, each client one keep-alive connection, every request with the controllers'
    token (reviewed once, then answered from the datastore's token cache as in production). `variants` (name,
    URL): datastores measured side by side, in turns at each level (`pairs` turns each; medians)."""
    for _, url in variants:
        with DatastoreClient(url, token=token) as client:
            client.put_plan("default", "bench", "bench-plan-lat", 1, "json", PLAN_100K)
    auth = {"Authorization": f"Bearer {token}"}
    for clients in levels:
        runs: dict[str, list[tuple[float, float, float, dict[int | str, int]]]] = {name: [] for name, _ in variants}
        for _ in range(pairs):
            for name, url in variants:
                runs[name].append(measure(f"{url}/api/v1/layers/default/bench/runs/bench-plan-lat/plan?format=json",
                                          auth, clients))
        for name, _ in variants:
            rps, p50, p99 = (statistics.median(run[i] for run in runs[name]) for i in range(3))
            others: dict[int | str, int] = {}
            for run in runs[name]:
                for status, count in run[3].items():
                    others[status] = others.get(status, 0) + count
            report(f"auth on, {label}, {name}", clients, rps, p50, p99, others, target_p99_ms)


def native_floor(work: Path, levels: list[int]) -> None:
    """The same 100 KiB body from a static file served by Go's net/http (no auth, no storage), to the same load
    generator: what this machine and client do at each level, the floor under the datastore's figures."""
    (work / "floor").mkdir(exist_ok=True)
    (work / "floor" / "plan.json").write_bytes(PLAN_100K)
    with running_static_server(work / "floor") as base:
        if not base:
            print("no `go` on PATH: the native floor was not measured")
            return
        load(f"{base}plan.json", {}, "static file, Go net/http (the floor)", levels, None)


def load(path: str, auth: dict[str, str], label: str, levels: list[int], target_p99_ms: float | None) -> None:
    for clients in levels:
        report(label, clients, *measure(path, auth, clients), target_p99_ms)


def report(label: str, clients: int, rps: float, p50: float, p99: float, others: dict[int | str, int],
           target_p99_ms: float | None) -> None:
    target = f"  (target p99 <= {target_p99_ms:.0f} ms)" if clients == 50 and target_p99_ms else ""
    print(f"GET plan (100 KiB), {label}, {clients:3d} clients x {max(10, 1000 // clients):4d}: "
          f"{rps:7.0f} req/s, p50 {p50 * 1000:6.1f} ms, p99 {p99 * 1000:6.1f} ms"
          f"{f', not 200: {others}' if others else ''}{target}", flush=True)


def measure(path: str, auth: dict[str, str], clients: int) -> tuple[float, float, float, dict[int | str, int]]:
    """Requests per second, p50 and p99 (seconds) of GETs of `path` by `clients` concurrent clients, and how many
    answers were not 200, by status."""

    async def run(clients: int, per_client: int) -> tuple[list[float], float, dict[int | str, int]]:
        samples: list[float] = []
        statuses: dict[int | str, int] = {}
        spans: list[tuple[float, float]] = []
        # aiohttp (C HTTP parser) as the load generator: it shares the 2 cores with the datastore, so the lighter
        # the client, the more the figures are the datastore's.
        connector = aiohttp.TCPConnector(limit=clients)
        async with aiohttp.ClientSession(connector=connector, headers=auth,
                                         timeout=aiohttp.ClientTimeout(total=120)) as http:
            async def one_client() -> None:
                # Two requests first (the connection opened, the token reviewed and cached), then the measured
                # ones right after: no pause in which the server would close an idle keep-alive connection.
                for i in range(2 + per_client):
                    started = time.perf_counter()
                    status: int | str
                    try:
                        async with http.get(path) as response:
                            await response.read()
                        status = response.status
                    except aiohttp.ClientError as exc:
                        status = type(exc).__name__
                    if i == 2:
                        first = started
                    if i >= 2:
                        samples.append(time.perf_counter() - started)
                        statuses[status] = statuses.get(status, 0) + 1
                spans.append((first, time.perf_counter()))

            await asyncio.gather(*(one_client() for _ in range(clients)))
        wall = max(end for _, end in spans) - min(start for start, _ in spans)
        return samples, wall, statuses

    samples, wall, statuses = asyncio.run(run(clients, max(10, 1000 // clients)))
    samples.sort()
    p50, p99 = samples[len(samples) // 2], samples[max(0, int(len(samples) * 0.99) - 1)]
    return len(samples) / wall, p50, p99, {k: v for k, v in statuses.items() if k != 200}


def peak_rss(url: str, token: str, pid: int, label: str, work: Path, mib: int = 200) -> None:
    plan, out = work / "huge.bin", work / "huge-out.bin"
    write_plan(plan, mib)
    with DatastoreClient(url, token=token, timeout=600) as client:
        client.put_plan("default", "bench", "bench-plan-warm", 1, "bin", b"warm")
        baseline = rss_bytes(pid)
        with RssSampler(pid) as rss:
            client.put_plan("default", "bench", "bench-plan-huge", 1, "bin", plan)
            client.download_plan("default", "bench", "bench-plan-huge", 1, "bin", out)
    plan.unlink()
    out.unlink()
    print(f"datastore RSS over a {mib} MiB upload + download, {label}: baseline {baseline / MiB:.1f} MiB, "
          f"peak {rss.peak / MiB:.1f} MiB, growth {(rss.peak - baseline) / MiB:.1f} MiB")


def direct_latency(s3: Any, bucket: str, levels: list[int]) -> None:
    """What the datastore's S3 GET does (ListObjectsV2 of the run, GetObject of the latest attempt's plan), with
    boto3 straight to the same moto server from as many threads as clients: the floor the S3 figures sit on."""
    s3.put_object(Bucket=bucket, Key="direct/run/1/plan.json", Body=PLAN_100K)

    def one(_: int) -> float:
        started = time.perf_counter()
        s3.list_objects_v2(Bucket=bucket, Prefix="direct/run/")
        s3.get_object(Bucket=bucket, Key="direct/run/1/plan.json")["Body"].read()
        return time.perf_counter() - started

    for clients in levels:
        per_client = max(10, 1000 // clients)
        with ThreadPoolExecutor(clients) as pool:
            list(pool.map(one, range(clients)))  # connections open
            started = time.perf_counter()
            samples = sorted(pool.map(one, range(clients * per_client)))
            wall = time.perf_counter() - started
        p50, p99 = samples[len(samples) // 2], samples[max(0, int(len(samples) * 0.99) - 1)]
        print(f"  the same calls with boto3 straight to moto, {clients:3d} threads x {per_client:4d}:        "
              f"{len(samples) / wall:7.0f} req/s, p50 {p50 * 1000:6.1f} ms, p99 {p99 * 1000:6.1f} ms")


@contextmanager
def compared(data_dir: Path, env: dict[str, str], base: Path | None, wanted: bool) -> Iterator[list[tuple[str, str]]]:
    """The datastores measured beside this checkout's (whose read cache is on): the same with the read cache off
    (every GET a cold read: the listing and the object from storage), and `base`'s datastore when given (its code
    first on the path; the same interpreter and dependencies)."""
    if not wanted:
        yield []
        return
    with contextlib.ExitStack() as stack:
        variants: list[tuple[str, str]] = []
        if base is not None:
            old = {**env, "PYTHONPATH": str(base.resolve()), "PYTHONSAFEPATH": "1"}
            variants.append(("before (base)", stack.enter_context(datastore_process(data_dir, old)).url))
        cold = {**env, "BURRITO_PY_DATASTORE_READ_CACHE_MAX_BYTES": "0"}
        variants.append(("read cache off (cold)", stack.enter_context(datastore_process(data_dir, cold)).url))
        yield variants


@contextmanager
def token_reviewer(work: Path) -> Iterator[tuple[Path, str]]:
    """The API emulator reviewing tokens for the datastore (auth on, as in production): its kubeconfig and a
    token of the controllers' service account (an admin of the datastore)."""
    kubeconfig = work / "kubeconfig"
    with running_apiserver(work, kubeconfig=kubeconfig) as api, \
            httpx.Client(base_url=api.url, headers=api.admin_headers, timeout=30) as http:
        ensure_service_account(http, *CONTROLLERS)
        yield kubeconfig, request_token(http, *CONTROLLERS, ["burrito-py"], 24 * 3600)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--mib", type=int, default=50)
    parser.add_argument("--clients", default="1,10,50,200", help="levels of concurrent clients, comma-separated")
    parser.add_argument("--skip", default="", help="parts to leave out, comma-separated: throughput,latency,rss,"
                        "s3,filesystem")
    parser.add_argument("--pairs", type=int, default=1, help="turns of each datastore at each level (medians)")
    parser.add_argument("--base", type=Path, help="a checkout of the code to compare with (e.g. main's): its "
                        "datastore is measured in turns with this one")
    args = parser.parse_args()
    levels = [int(level) for level in args.clients.split(",") if level]
    skip = set(args.skip.split(","))
    os.environ.update(CREDENTIALS)
    with tempfile.TemporaryDirectory(prefix="bench-datastore-") as tmp, moto_server() as endpoint, \
            token_reviewer(Path(tmp)) as (kubeconfig, token):
        work = Path(tmp)
        s3 = make_client(endpoint_url=endpoint, path_style=True, boto3_checksums=True)
        bucket = f"bench-{uuid.uuid4().hex[:12]}"
        s3.create_bucket(Bucket=bucket)
        auth = {"BURRITO_PY_DATASTORE_AUTH_ENABLED": "true", "BURRITO_PY_DATASTORE_KUBECONFIG": str(kubeconfig),
                "BURRITO_PY_DATASTORE_MAX_BODY_BYTES": str(256 * MiB),
                # The RSS part sends a 200 MiB plan: over the 64 MiB plan.bin default (§10.1).
                "BURRITO_PY_DATASTORE_MAX_PLAN_BYTES": str(256 * MiB)}
        env = {**CREDENTIALS, **auth, "BURRITO_PY_DATASTORE_BACKEND": "s3", "BURRITO_PY_DATASTORE_S3_BUCKET": bucket,
               "BURRITO_PY_DATASTORE_S3_ENDPOINT_URL": endpoint, "BURRITO_PY_DATASTORE_S3_PATH_STYLE": "true"}
        print(f"machine: {os.cpu_count()} cores, load average {' '.join(f'{v:.1f}' for v in os.getloadavg())}")
        if "s3" not in skip:
            with datastore_process(work / "s3-data", env) as ds, \
                    compared(work / "s3-data", env, args.base, "latency" not in skip) as variants, \
                    contextlib.ExitStack() as stack:
                if "throughput" not in skip:
                    base = None
                    if args.base is not None:
                        old = {**env, "PYTHONPATH": str(args.base.resolve()), "PYTHONSAFEPATH": "1"}
                        before = stack.enter_context(datastore_process(work / "s3-base", old))
                        base = (before.url, before.pid)
                    throughput(args.rounds, args.mib, s3, bucket, ds.url, token, work, ds.pid, base)
                    stack.close()
                if "latency" not in skip:
                    latency([*variants, (CACHED, ds.url)], token, "S3 backend", 200, levels, args.pairs)
                    direct_latency(s3, bucket, levels)
                if "rss" not in skip:
                    peak_rss(ds.url, token, ds.pid, "S3 backend", work)
        if "filesystem" not in skip:
            with datastore_process(work / "fs-data", auth) as ds, \
                    compared(work / "fs-data", auth, args.base, "latency" not in skip) as variants:
                if "latency" not in skip:
                    latency([*variants, (CACHED, ds.url)], token, "filesystem backend", 100, levels, args.pairs)
                    native_floor(work, levels)
                if "rss" not in skip:
                    peak_rss(ds.url, token, ds.pid, "filesystem backend", work)
        print(f"load average after: {' '.join(f'{v:.1f}' for v in os.getloadavg())}")


if __name__ == "__main__":
    main()
