"""A body whose sum the client declared goes to S3 as one streamed PutObject (docs/architecture.md §10.7, issue 31):
botocore never reads it for a hash (it is a stream), and S3 still checks it against the declared SHA-256, as the
SigV4 payload hash and as `x-amz-checksum-sha256` (no CRC32 besides, no aws-chunked framing). These tests pin that
against the installed botocore by looking at the requests it would send (nothing leaves the process), and the pipe
between the event loop and the sending thread."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import threading
from typing import Any

import pytest
from botocore.awsrequest import AWSResponse

from burrito_py.datastore.s3 import S3Storage, _BodyPipe, _Withdrawn, make_client
from tests.unit.datastore.test_s3_checksums import _Headers, _Raw

BODY = b"burrito" * 100_000
# Not BODY's sum: the header can only hold it if it is the declared value, not one botocore computed.
DECLARED = hashlib.sha256(b"what the client declared").hexdigest()


def _filled(data: bytes, sha256: str) -> _BodyPipe:
    loop = asyncio.new_event_loop()
    try:
        pipe = _BodyPipe(loop, sha256, limit=len(data) + 1)
        loop.run_until_complete(pipe.put(data))
        pipe.finish()
        return pipe
    finally:
        loop.close()


def _sent(endpoint: str | None, monkeypatch: pytest.MonkeyPatch) -> tuple[dict[str, str], bytes]:
    """The headers and body of the streamed PutObject the client would send to `endpoint`."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    client = make_client(endpoint_url=endpoint, region="us-east-1", path_style=True)
    S3Storage(client, "b")  # declares the streamed payloads on this client
    seen: dict[str, Any] = {}

    def capture(request: Any, **_: Any) -> AWSResponse:
        seen["headers"] = {k.lower(): v.decode() if isinstance(v, bytes) else v for k, v in request.headers.items()}
        seen["body"] = b"".join(iter(lambda: request.body.read(65536), b""))
        return AWSResponse(request.url, 200, _Headers({"ETag": '"etag"'}), _Raw())

    client.meta.events.register("before-send.s3.PutObject", capture)
    client.put_object(Bucket="b", Key="k", Body=_filled(BODY, DECLARED), ContentLength=len(BODY),
                      ChecksumSHA256=base64.b64encode(bytes.fromhex(DECLARED)).decode())
    return seen["headers"], seen["body"]


@pytest.mark.parametrize("endpoint", ["http://s3.example:9000", "https://s3.example", None])
def test_the_declared_sum_is_signed_and_sent_without_reading_the_body(endpoint: str | None,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    headers, body = _sent(endpoint, monkeypatch)
    assert body == BODY  # all of it still there for the sender, as it is: nothing read it before
    assert headers["x-amz-content-sha256"] == DECLARED  # S3 refuses a body that does not hash to it
    assert headers["x-amz-checksum-sha256"] == base64.b64encode(bytes.fromhex(DECLARED)).decode()
    assert headers["content-length"] == str(len(BODY))
    assert "x-amz-trailer" not in headers and "aws-chunked" not in headers.get("content-encoding", "")
    assert not [name for name in headers if name.startswith("x-amz-checksum-") and name != "x-amz-checksum-sha256"]


def test_other_put_objects_are_signed_as_botocore_signs_them(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    client = make_client(endpoint_url="http://s3.example:9000", region="us-east-1", path_style=True)
    S3Storage(client, "b")
    seen: dict[str, str] = {}

    def capture(request: Any, **_: Any) -> AWSResponse:
        sha = request.headers["X-Amz-Content-SHA256"]
        seen["sha"] = sha.decode() if isinstance(sha, bytes) else sha
        return AWSResponse(request.url, 200, _Headers({"ETag": '"etag"'}), _Raw())

    client.meta.events.register("before-send.s3.PutObject", capture)
    client.put_object(Bucket="b", Key="k", Body=bytearray(BODY))
    assert seen["sha"] == hashlib.sha256(BODY).hexdigest()


def test_the_pipe_hands_pieces_whole_holds_at_most_its_limit_and_ends() -> None:
    async def scenario() -> None:
        pipe = _BodyPipe(asyncio.get_running_loop(), DECLARED, limit=10)
        assert await pipe.put(b"12345")  # below the limit: at once
        third = asyncio.ensure_future(pipe.put(b"67890"))  # reaches it: waits for room
        await asyncio.sleep(0.05)
        assert not third.done()
        assert await asyncio.to_thread(pipe.read, 3) == b"12345"  # whole, whatever the size asked
        assert await asyncio.wait_for(third, 5) is True
        pipe.finish()
        assert await asyncio.to_thread(pipe.read) == b"67890"
        assert await asyncio.to_thread(pipe.read) == b""

    asyncio.run(scenario())


def test_a_failed_body_breaks_the_reader_off_and_a_gone_reader_stops_the_feeder() -> None:
    async def scenario() -> None:
        pipe = _BodyPipe(asyncio.get_running_loop(), DECLARED, limit=4)
        reading = threading.Event()

        def reader() -> None:
            reading.set()
            pipe.read()

        waiting = asyncio.ensure_future(asyncio.to_thread(reader))
        await asyncio.to_thread(reading.wait)
        pipe.fail(ValueError("the body's sum differs"))
        with pytest.raises(_Withdrawn):
            await waiting
        feeding = asyncio.ensure_future(pipe.put(b"123456"))  # over the limit: waits for a reader
        await asyncio.sleep(0.05)
        pipe.reader_done()  # S3 answered (or the call failed) before the body was all sent
        assert await asyncio.wait_for(feeding, 5) is False
        assert await pipe.put(b"more") is False

    asyncio.run(scenario())
