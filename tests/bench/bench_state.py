"""Managed state (docs/architecture.md §10.6): what the datastore's state backend costs over S3.

    python3 -m tests.bench.bench_state [--rounds N] [--large-mib M] [--versions V] [--versions-only]

Three processes: moto's standalone S3 server, `burrito-py datastore start` with the S3 backend on it, and this
client. Figures (medians over the rounds), each as Terraform's http backend does it:
- write (POST of a new serial, with Content-MD5) and read (GET of the current state) of a 100 KiB state through
  the datastore, against put_object/get_object of the same bytes straight to the same moto server with boto3;
- the same for a large state (`--large-mib`, default 50; the datastore's limit is raised to fit; 0 skips it);
- a LOCK/UNLOCK round trip;
- the versions listing (GET …/state/versions, through HTTP) of a layer with `--versions` kept versions (default
  1,000; the datastore keeps that many for the bench: its default is 100), beside the listing of its version keys
  straight to moto (the listing's floor: it lists them to check the index); its set-up writes the versions through
  the datastore's storage layer in this process (`seed_versions`), then the first listing indexes them, then ten
  POSTs through HTTP (timed) add versions as Terraform does.
Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import hashlib
import json
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from burrito_py.datastore.auth import Principal
from burrito_py.datastore.s3 import S3Storage, make_client
from burrito_py.datastore.state import parse_state, version_key
from burrito_py.datastore.state_routes import StateStore
from burrito_py.datastore.storage import Storage
from tests.bench.bench_datastore import CREDENTIALS, moto_server
from tests.support.datastore_process import datastore_process

KiB, MiB = 1024, 1024 * 1024
LAYER = "/api/v1/layers/bench/app/state"


async def _once(data: bytes) -> AsyncIterator[bytes]:
    yield data


def make_state(serial: int, size: int) -> bytes:
    """A state of about `size` bytes: terraform_data resources with a 1 KiB input each."""
    count = max(1, size // 1100)
    filler = hashlib.sha256(str(serial).encode()).hexdigest() * 16
    return json.dumps({"version": 4, "terraform_version": "1.11.4", "serial": serial, "lineage": "bench",
                       "outputs": {}, "resources": [
                           {"mode": "managed", "type": "terraform_data", "name": f"r{i}", "provider": "x",
                            "instances": [{"attributes": {"input": filler}}]} for i in range(count)]}).encode()


def timed(samples: list[float], call: Callable[[], Any]) -> None:
    started = time.perf_counter()
    call()
    samples.append((time.perf_counter() - started) * 1000)


def median(samples: list[float]) -> str:
    return f"{statistics.median(samples):8.1f} ms"


def compare(label: str, size: int, rounds: int, url: str, s3: Any, bucket: str) -> None:
    http = httpx.Client(base_url=url, timeout=300)
    figures: dict[str, list[float]] = {k: [] for k in ("ds_write", "ds_read", "s3_write", "s3_read")}
    base = int(time.time() * 1000)  # serials only grow, across labels too
    for n in range(rounds):
        body = make_state(base + n, size)
        md5 = base64.b64encode(hashlib.md5(body, usedforsecurity=False).digest()).decode()

        def write(body: bytes = body, md5: str = md5) -> None:
            http.post(LAYER, content=body, headers={"Content-MD5": md5}).raise_for_status()

        timed(figures["ds_write"], write)
        timed(figures["ds_read"], lambda: http.get(LAYER).raise_for_status())
        key = f"direct/{uuid.uuid4().hex}"
        timed(figures["s3_write"], lambda body=body, key=key: s3.put_object(Bucket=bucket, Key=key, Body=body))
        timed(figures["s3_read"], lambda key=key: s3.get_object(Bucket=bucket, Key=key)["Body"].read())
    actual = len(make_state(0, size))
    print(f"{label} state ({actual / KiB:.0f} KiB), medians of {rounds}:")
    print(f"  write: datastore {median(figures['ds_write'])}   S3 put_object {median(figures['s3_write'])}")
    print(f"  read:  datastore {median(figures['ds_read'])}   S3 get_object {median(figures['s3_read'])}")
    http.close()


def lock_round_trip(rounds: int, url: str) -> None:
    samples: list[float] = []
    with httpx.Client(base_url=url, timeout=60) as http:
        for n in range(rounds):
            info = json.dumps({"ID": f"bench-{n}", "Operation": "OperationTypeApply", "Who": "bench"}).encode()

            def round_trip(info: bytes = info) -> None:
                http.request("LOCK", f"{LAYER}/lock", content=info).raise_for_status()
                http.request("UNLOCK", f"{LAYER}/lock", content=info).raise_for_status()

            timed(samples, round_trip)
    print(f"LOCK + UNLOCK round trip, median of {rounds}: {median(samples)}")


def seed_versions(storage: Storage, prefix: str, count: int) -> float:
    """`count` versions of a small state written as the datastore stores them (the state, then its record), through
    the datastore's own storage layer in this process, 16 at a time: through HTTP, one POST at a time, writing 1,000
    versions did not finish in 15 minutes on moto. They carry no index: the first listing builds it (a store from
    before the index)."""
    async def seed() -> None:
        gate = asyncio.Semaphore(16)
        state = StateStore(storage, prefix)
        who = Principal("system:serviceaccount:burrito-py-system:bench", admin=True)

        async def one(serial: int) -> None:
            body = make_state(serial, 1 * KiB)
            async with gate:
                await storage.put(version_key(prefix, serial), _once(body), 1 * MiB, once=True)
                await state.write_meta(parse_state(body), who, datetime.now(UTC))

        await asyncio.gather(*(one(serial) for serial in range(1, count + 1)))

    started = time.perf_counter()
    asyncio.run(seed())
    return time.perf_counter() - started


def storage_keys(storage: Storage, prefix: str) -> list[str]:
    return asyncio.run(storage.list(prefix))


def versions_listing(count: int, rounds: int, url: str, storage: Storage) -> None:
    """A layer with `count` kept versions, then the listing's time through HTTP (GET …/state/versions: what the REST
    API, the UI and the CLI read); also the first listing (it builds the index of a store written before it) and the
    cost of a POST (a new version: the index's update and retention's deletion with it) at that many versions."""
    layer = "/api/v1/layers/bench/many/state"
    seeding = seed_versions(storage, "states/bench/many", count)
    samples: list[float] = []
    with httpx.Client(base_url=url, timeout=300) as http:
        first: list[float] = []
        timed(first, lambda: http.get(f"{layer}/versions").raise_for_status())
        writes: list[float] = []
        for serial in range(count + 1, count + 11):
            body = make_state(serial, 1 * KiB)
            timed(writes, lambda body=body: http.post(layer, content=body).raise_for_status())
        for _ in range(rounds):
            timed(samples, lambda: http.get(f"{layer}/versions").raise_for_status())
        listed = len(http.get(f"{layer}/versions").json())
    floor: list[float] = []
    for _ in range(rounds):  # what any listing of the layer's version keys costs on this moto: the listing's floor
        timed(floor, lambda: storage_keys(storage, "states/bench/many/versions"))
    print(f"versions listing of {listed} kept versions (S3, through HTTP), median of {rounds}: {median(samples)}")
    print(f"  beside it, its floor: the listing of its {2 * listed + 1} version keys alone (ListObjectsV2, boto3 "
          f"straight to moto): {median(floor)}")
    print(f"  set-up: {count} versions written through the datastore's storage layer in-process (not HTTP), "
          f"16 at a time: {seeding:.1f} s")
    print(f"  the first listing of that store (written without an index): {median(first)}")
    print(f"  a POST of a new version at {listed} versions (one dropped by retention), median of "
          f"{len(writes)}: {median(writes)}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--large-mib", type=int, default=50)
    parser.add_argument("--versions", type=int, default=1000)
    parser.add_argument("--versions-only", action="store_true", help="only the versions listing")
    args = parser.parse_args()
    os.environ.update(CREDENTIALS)
    with tempfile.TemporaryDirectory(prefix="bench-state-") as tmp, moto_server() as endpoint:
        s3 = make_client(endpoint_url=endpoint, path_style=True)
        bucket = f"bench-{uuid.uuid4().hex[:12]}"
        s3.create_bucket(Bucket=bucket)
        env = {**CREDENTIALS, "BURRITO_PY_DATASTORE_BACKEND": "s3", "BURRITO_PY_DATASTORE_S3_BUCKET": bucket,
               "BURRITO_PY_DATASTORE_S3_ENDPOINT_URL": endpoint, "BURRITO_PY_DATASTORE_S3_PATH_STYLE": "true",
               "BURRITO_PY_DATASTORE_MAX_STATE_BYTES": str(max(64, 2 * args.large_mib) * MiB),
               "BURRITO_PY_DATASTORE_STATE_VERSIONS_KEPT": str(max(100, args.versions))}
        with datastore_process(Path(tmp) / "data", env) as ds:
            if not args.versions_only:
                compare("100 KiB", 100 * KiB, args.rounds, ds.url, s3, bucket)
                if args.large_mib:
                    compare(f"{args.large_mib} MiB", args.large_mib * MiB, max(3, args.rounds // 5), ds.url, s3,
                            bucket)
                lock_round_trip(args.rounds, ds.url)
            if args.versions:
                # The datastore process's own backend class on the same bucket (no key prefix, no encryption).
                versions_listing(args.versions, args.rounds, ds.url, S3Storage(s3, bucket))


if __name__ == "__main__":
    main()
