"""Multipart uploads left by a killed datastore are aborted at start-up and on a schedule, with retention off
(issue 11, item 18): `burrito-py datastore start` on the S3 backend (moto)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from burrito_py.datastore.in_process import free_port
from tests.integration.datastore.conftest import S3Bucket
from tests.support.emulator import wait_for


def test_abandoned_multipart_uploads_are_aborted_at_start_up_and_on_a_schedule(s3_bucket: S3Bucket,
                                                                                tmp_path: Path) -> None:
    client, bucket = s3_bucket.client, s3_bucket.name
    client.create_multipart_upload(Bucket=bucket, Key="burrito/layers/default/app/r/1/plan.bin")
    assert s3_bucket.uploads_in_progress() == ["burrito/layers/default/app/r/1/plan.bin"]
    env = {
        **os.environ,
        "BURRITO_PY_DATASTORE_BACKEND": "s3",
        "BURRITO_PY_DATASTORE_S3_BUCKET": bucket,
        "BURRITO_PY_DATASTORE_S3_PREFIX": "burrito",
        "BURRITO_PY_DATASTORE_S3_ENDPOINT_URL": s3_bucket.endpoint,
        "BURRITO_PY_DATASTORE_S3_PATH_STYLE": "true",
        "BURRITO_PY_DATASTORE_AUTH_ENABLED": "false",
        "BURRITO_PY_DATASTORE_RETENTION_ENABLED": "false",
        "BURRITO_PY_DATASTORE_S3_ABANDONED_UPLOAD_SECONDS": "0",
        "BURRITO_PY_DATASTORE_S3_UPLOAD_SWEEP_SECONDS": "1",
        "BURRITO_PY_DATASTORE_DATA_DIR": str(tmp_path / "unused"),
    }
    process = subprocess.Popen(
        [sys.executable, "-c", "from burrito_py.entry import main; main()", "datastore", "start",
         "--host", "127.0.0.1", "--port", str(free_port())],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        wait_for(lambda: s3_bucket.uploads_in_progress() == [], 30, interval=0.1, what="the start-up sweep")
        started = time.monotonic()
        client.create_multipart_upload(Bucket=bucket, Key="burrito/layers/default/app/r/2/plan.bin")
        wait_for(lambda: s3_bucket.uploads_in_progress() == [], 30, interval=0.1, what="a scheduled sweep")
        assert time.monotonic() - started < 10
        assert process.poll() is None
    finally:
        process.terminate()
        output, _ = process.communicate(timeout=30)
    assert "aborted 1 abandoned multipart upload(s)" in output
    assert "Traceback" not in output
