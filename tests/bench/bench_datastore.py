"""The datastore's cost over S3, its latency under concurrency and its memory on a large plan.

    python3 tests/bench/bench_datastore.py [--rounds N] [--mib M]

Three processes: moto's standalone S3 server, `burrito-py datastore start` with the S3 backend on it, and
this client. Figures (medians over the rounds):
- upload and download throughput of a 50 MiB plan, file to file, through the datastore (DatastoreClient)
  and with boto3 directly against the same moto server (its managed transfer, upload_file/download_file,
  and a single put_object/get_object stream), and the ratios (target >= 0.7);
- p50/p99 latency of GET plan (100 KiB) with 50 concurrent clients, S3 and filesystem backends;
- the datastore's peak RSS over a 200 MiB upload + download, both backends.
Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from burrito_py.datastore.client import DatastoreClient
from burrito_py.datastore.in_process import free_port
from burrito_py.datastore.s3 import make_client
from tests.support.datastore_process import RssSampler, datastore_process, rss_bytes

MiB = 1024 * 1024
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench", "AWS_DEFAULT_REGION": "us-east-1"}


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


def throughput(rounds: int, mib: int, s3: Any, bucket: str, url: str, work: Path) -> None:
    plan, out = work / "plan.bin", work / "out.bin"
    write_plan(plan, mib)
    figures: dict[str, list[float]] = {k: [] for k in
                                       ("ds_up", "ds_down", "tx_up", "tx_down", "obj_up", "obj_down")}

    def timed(key: str, call: Any) -> None:
        started = time.perf_counter()
        call()
        figures[key].append(mib / (time.perf_counter() - started))

    def get_object() -> None:
        body = s3.get_object(Bucket=bucket, Key="direct/obj.bin")["Body"]
        with out.open("wb") as handle:
            for chunk in body.iter_chunks(MiB):
                handle.write(chunk)

    def put_object() -> None:
        with plan.open("rb") as handle:
            s3.put_object(Bucket=bucket, Key="direct/obj.bin", Body=handle)

    with DatastoreClient(url, timeout=300) as client:
        for i in range(rounds):  # interleaved, so a busy moment of the machine hits every variant alike
            timed("ds_up", lambda i=i: client.put_plan("default", "bench", f"bench-plan-{i}", 1, "bin", plan))
            timed("ds_down", lambda i=i: client.download_plan("default", "bench", f"bench-plan-{i}", 1, "bin", out))
            timed("tx_up", lambda: s3.upload_file(str(plan), bucket, "direct/plan.bin"))
            timed("tx_down", lambda: s3.download_file(bucket, "direct/plan.bin", str(out)))
            timed("obj_up", put_object)
            timed("obj_down", get_object)
    med = {k: statistics.median(v) for k, v in figures.items()}
    print(f"{mib} MiB plan, median of {rounds} rounds (MiB/s):")
    print(f"  upload:   datastore {med['ds_up']:7.1f}   boto3 upload_file {med['tx_up']:7.1f}   "
          f"boto3 put_object {med['obj_up']:7.1f}   ratio {med['ds_up'] / med['tx_up']:.2f} / "
          f"{med['ds_up'] / med['obj_up']:.2f}")
    print(f"  download: datastore {med['ds_down']:7.1f}   boto3 download_file {med['tx_down']:7.1f}   "
          f"boto3 get_object {med['obj_down']:7.1f}   ratio {med['ds_down'] / med['tx_down']:.2f} / "
          f"{med['ds_down'] / med['obj_down']:.2f}")


def latency(url: str, label: str, clients: int = 50, per_client: int = 20) -> None:
    with DatastoreClient(url) as client:
        client.put_plan("default", "bench", "bench-plan-lat", 1, "json", b"{" + b" " * (100 * 1024 - 2) + b"}")
    path = f"{url}/api/v1/layers/default/bench/runs/bench-plan-lat/plan?format=json"

    async def run() -> list[float]:
        samples: list[float] = []
        limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
        async with httpx.AsyncClient(limits=limits, timeout=60) as http:
            async def one_client() -> None:
                for _ in range(per_client):
                    started = time.perf_counter()
                    response = await http.get(path)
                    await response.aread()
                    samples.append(time.perf_counter() - started)
                    assert response.status_code == 200

            await asyncio.gather(*(one_client() for _ in range(clients)))
        return samples

    samples = sorted(asyncio.run(run()))
    p50, p99 = samples[len(samples) // 2], samples[int(len(samples) * 0.99) - 1]
    print(f"GET plan (100 KiB, latest attempt), {clients} concurrent clients x {per_client}, {label}: "
          f"p50 {p50 * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms")


def peak_rss(url: str, pid: int, label: str, work: Path, mib: int = 200) -> None:
    plan, out = work / "huge.bin", work / "huge-out.bin"
    write_plan(plan, mib)
    with DatastoreClient(url, timeout=600) as client:
        client.put_plan("default", "bench", "bench-plan-warm", 1, "bin", b"warm")
        baseline = rss_bytes(pid)
        with RssSampler(pid) as rss:
            client.put_plan("default", "bench", "bench-plan-huge", 1, "bin", plan)
            client.download_plan("default", "bench", "bench-plan-huge", 1, "bin", out)
    plan.unlink()
    out.unlink()
    print(f"datastore RSS over a {mib} MiB upload + download, {label}: baseline {baseline / MiB:.1f} MiB, "
          f"peak {rss.peak / MiB:.1f} MiB, growth {(rss.peak - baseline) / MiB:.1f} MiB")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--mib", type=int, default=50)
    args = parser.parse_args()
    os.environ.update(CREDENTIALS)
    with tempfile.TemporaryDirectory(prefix="bench-datastore-") as tmp, moto_server() as endpoint:
        work = Path(tmp)
        s3 = make_client(endpoint_url=endpoint, path_style=True)
        bucket = f"bench-{uuid.uuid4().hex[:12]}"
        s3.create_bucket(Bucket=bucket)
        env = {**CREDENTIALS, "BURRITO_PY_DATASTORE_BACKEND": "s3", "BURRITO_PY_DATASTORE_S3_BUCKET": bucket,
               "BURRITO_PY_DATASTORE_S3_ENDPOINT_URL": endpoint, "BURRITO_PY_DATASTORE_S3_PATH_STYLE": "true",
               "BURRITO_PY_DATASTORE_MAX_BODY_BYTES": str(256 * MiB)}
        with datastore_process(work / "s3-data", env) as ds:
            throughput(args.rounds, args.mib, s3, bucket, ds.url, work)
            latency(ds.url, "S3 backend")
            peak_rss(ds.url, ds.pid, "S3 backend", work)
        fs_env = {"BURRITO_PY_DATASTORE_MAX_BODY_BYTES": str(256 * MiB)}
        with datastore_process(work / "fs-data", fs_env) as ds:
            latency(ds.url, "filesystem backend")
            peak_rss(ds.url, ds.pid, "filesystem backend", work)


if __name__ == "__main__":
    main()
