"""Every S3 request body the datastore sends is covered by exactly one checksum S3 checks (docs/architecture.md §10):
over plain http the SigV4 signature holds the body's SHA-256 and no CRC32 is computed besides it; over https the
body goes unsigned and its CRC32 stays. botocore decides the signing: these tests pin the rule against the
installed botocore by looking at the requests it would send (nothing leaves the process)."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
from botocore.awsrequest import AWSResponse

from burrito_py.datastore.s3 import make_client, payload_signed

BODY = b"burrito" * 100_000


class _Headers(dict[str, str]):
    def get_all(self, name: str, default: Any = None) -> Any:  # urllib3's HTTPHeaderDict, as botocore reads it
        return [self[name]] if name in self else default


class _Raw:
    def __init__(self) -> None:
        self.headers = _Headers()

    def stream(self, *_: Any, **__: Any) -> Any:
        return iter([b""])


def _sent(endpoint: str, monkeypatch: pytest.MonkeyPatch, body: bytes | bytearray = BODY,
          **kwargs: Any) -> tuple[dict[str, str], bytes]:
    """The headers and body of the UploadPart request the client would send to `endpoint`."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    client = make_client(endpoint_url=endpoint, region="us-east-1", path_style=True, **kwargs)
    seen: dict[str, Any] = {}

    def capture(request: Any, **_: Any) -> AWSResponse:
        seen["headers"] = {k.lower(): v.decode() if isinstance(v, bytes) else v for k, v in request.headers.items()}
        sent = request.body
        seen["body"] = sent.read() if hasattr(sent, "read") else bytes(sent)
        return AWSResponse(request.url, 200, _Headers({"ETag": '"etag"'}), _Raw())

    client.meta.events.register("before-send.s3.UploadPart", capture)
    client.upload_part(Bucket="b", Key="k", UploadId="u", PartNumber=1, Body=body)
    return seen["headers"], seen["body"]


@pytest.mark.parametrize("kind", [bytes, bytearray])  # `S3Storage.put` sends bytearrays
def test_plain_http_signs_the_body_and_computes_no_crc32(kind: type, monkeypatch: pytest.MonkeyPatch) -> None:
    headers, body = _sent("http://s3.example:9000", monkeypatch, kind(BODY))
    assert body == BODY
    assert headers["x-amz-content-sha256"] == hashlib.sha256(BODY).hexdigest()  # S3 checks the body against it
    assert not [name for name in headers if name.startswith("x-amz-checksum-") or name == "x-amz-trailer"]
    # A bytearray is sent as it is (one `sendall`, no 100-continue round trip); bytes become a file botocore
    # reads 16 KiB at a time behind `Expect: 100-continue`.
    assert ("expect" in headers) is (kind is bytes)


@pytest.mark.parametrize("kind", [bytes, bytearray])
def test_https_keeps_the_crc32_of_the_unsigned_body(kind: type, monkeypatch: pytest.MonkeyPatch) -> None:
    headers, body = _sent("https://s3.example", monkeypatch, kind(BODY))
    assert BODY in body  # in aws-chunked framing when the CRC32 goes in a trailer
    assert headers["x-amz-content-sha256"] != hashlib.sha256(BODY).hexdigest()  # unsigned: the checksum covers it
    assert "x-amz-checksum-crc32" in headers or headers.get("x-amz-trailer") == "x-amz-checksum-crc32"


def test_boto3_defaults_on_request(monkeypatch: pytest.MonkeyPatch) -> None:
    headers, _ = _sent("http://s3.example:9000", monkeypatch, boto3_checksums=True)
    assert headers["x-amz-content-sha256"] == hashlib.sha256(BODY).hexdigest()
    assert "x-amz-checksum-crc32" in headers or headers.get("x-amz-trailer") == "x-amz-checksum-crc32"


@pytest.mark.parametrize(
    ("endpoint", "signed"),
    [(None, False), ("https://s3.example", False), ("HTTPS://s3.example", False), ("http://minio:9000", True),
     ("HTTP://minio:9000", True)],
)
def test_payload_signed(endpoint: str | None, signed: bool) -> None:
    assert payload_signed(endpoint) is signed
