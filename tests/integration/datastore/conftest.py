"""Shared S3 fixtures: moto's standalone server over real HTTP (never the in-process decorator)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from moto.server import ThreadedMotoServer

from burrito_py.datastore.s3 import MIN_PART_SIZE, S3Storage, make_client

# moto accepts any credentials; boto3 reads them from the environment as it would in a pod.
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


@dataclass
class S3Bucket:
    endpoint: str
    name: str
    client: Any

    def storage(self, prefix: str = "burrito", part_size: int = MIN_PART_SIZE) -> S3Storage:
        return S3Storage(make_client(endpoint_url=self.endpoint, path_style=True), self.name, prefix, part_size)

    def keys(self) -> list[str]:
        return [item["Key"] for item in self.client.list_objects_v2(Bucket=self.name).get("Contents", [])]

    def uploads_in_progress(self) -> list[str]:
        return [item["Key"] for item in self.client.list_multipart_uploads(Bucket=self.name).get("Uploads", [])]


@pytest.fixture
def s3_bucket(moto_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> S3Bucket:
    """A fresh bucket per test on the shared moto server."""
    for name, value in CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    client = make_client(endpoint_url=moto_endpoint, path_style=True)
    bucket = f"burrito-{uuid.uuid4().hex[:16]}"
    client.create_bucket(Bucket=bucket)
    return S3Bucket(moto_endpoint, bucket, client)
