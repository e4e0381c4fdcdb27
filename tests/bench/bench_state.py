"""Managed state (docs/architecture.md §10.6): what the datastore's state backend costs over S3.

    python3 -m tests.bench.bench_state [--rounds N] [--large-mib M] [--versions V]

Three processes: moto's standalone S3 server, `burrito-py datastore start` with the S3 backend on it, and this
client. Figures (medians over the rounds), each as Terraform's http backend does it:
- write (POST of a new serial, with Content-MD5) and read (GET of the current state) of a 100 KiB state through
  the datastore, against put_object/get_object of the same bytes straight to the same moto server with boto3;
- the same for a large state (`--large-mib`, default 50; the datastore's limit is raised to fit; 0 skips it);
- a LOCK/UNLOCK round trip;
- the versions listing (GET …/state/versions) of a layer with `--versions` kept versions (default 1,000; the
  datastore keeps that many for the bench: its default is 100).
Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from burrito_py.datastore.s3 import make_client
from tests.bench.bench_datastore import CREDENTIALS, moto_server
from tests.support.datastore_process import datastore_process

KiB, MiB = 1024, 1024 * 1024
LAYER = "/api/v1/layers/bench/app/state"


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


def versions_listing(count: int, rounds: int, url: str) -> None:
    """`count` versions of a small state, then the listing's time (what the REST API, the UI and the CLI read)."""
    layer = "/api/v1/layers/bench/many/state"
    samples: list[float] = []
    with httpx.Client(base_url=url, timeout=120) as http:
        started = time.perf_counter()
        for serial in range(1, count + 1):
            http.post(layer, content=make_state(serial, 1 * KiB)).raise_for_status()
        writing = time.perf_counter() - started
        for _ in range(rounds):
            timed(samples, lambda: http.get(f"{layer}/versions").raise_for_status())
        listed = len(http.get(f"{layer}/versions").json())
    print(f"versions listing of {listed} kept versions, median of {rounds}: {median(samples)} "
          f"(writing them: {writing:.1f} s, {writing / count * 1000:.0f} ms each)")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--large-mib", type=int, default=50)
    parser.add_argument("--versions", type=int, default=1000)
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
            compare("100 KiB", 100 * KiB, args.rounds, ds.url, s3, bucket)
            if args.large_mib:
                compare(f"{args.large_mib} MiB", args.large_mib * MiB, max(3, args.rounds // 5), ds.url, s3, bucket)
            lock_round_trip(args.rounds, ds.url)
            if args.versions:
                versions_listing(args.versions, args.rounds, ds.url)


if __name__ == "__main__":
    main()
