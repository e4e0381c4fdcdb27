"""S3 (or any S3-compatible endpoint) as the datastore's storage, through boto3.

A body whose sum the client declared streams to its key as one PutObject as it arrives (`_put_streamed`; memory:
at most `PIPE_BYTES` of it). Other uploads go part by part: a body no larger than one part is a single PutObject,
anything larger a multipart upload whose parts go out while the next one is read (memory: a part being read plus
the parts in flight). Both PutObject and CompleteMultipartUpload make an object visible atomically, and a failed,
interrupted or oversized upload is aborted, so no partial object is ever readable. boto3 is synchronous: every
call runs in a worker thread so the event loop keeps serving other requests.

The object's SHA-256 and size travel in its user metadata (`x-amz-meta-burrito-sha256`, `-size`), which S3
stores atomically with it. A single PutObject knows them when it is sent; a multipart body's sum is known only
at its end, so it is uploaded under `staging/<uuid>` first and then copied server-side (UploadPartCopy) into a
multipart upload of the real key created with the metadata. A `once` write is conditional (`If-None-Match: *`
on PutObject or CompleteMultipartUpload): S3 itself refuses to replace an object, whatever raced it. Staging
objects left by a killed datastore are removed by the abandoned-upload sweep.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import logging
import threading
import uuid
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable
from datetime import datetime, timedelta
from typing import Any, TypeVar

import anyio
import boto3
import botocore.auth
import botocore.handlers
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from burrito_py.datastore.storage import (
    CHUNK,
    DeleteFailed,
    Describe,
    Exists,
    Hashing,
    ObjectInfo,
    Opened,
    Stored,
    check_expected,
    check_key,
)

log = logging.getLogger(__name__)
T = TypeVar("T")

MIN_PART_SIZE = 5 * 1024 * 1024  # S3's minimum for every part but the last
DEFAULT_PART_SIZE = 8 * 1024 * 1024
# Parts uploading while the next one is read: more overlaps better, each costs a part of memory.
DEFAULT_CONCURRENCY = 2
_MISSING = {"404", "NoSuchKey", "NotFound"}
_PRECONDITION = {"412", "PreconditionFailed"}
DELETE_BATCH = 1000  # the most keys one DeleteObjects call takes
SHA_META, SIZE_META = "burrito-sha256", "burrito-size"  # S3 lowercases user metadata keys
STAGING = "staging"  # multipart bodies, before their copy under the real key (with their sum)
MAX_COPY_PART = 5 * 1024**3  # the largest part UploadPartCopy takes
_FIRST = "BurritoFirstChunk"  # where `_get` puts the body's first chunk in GetObject's answer
MAX_PUT = 5 * 1024**3  # the largest body one PutObject takes
# A body with a declared sum streams to S3 as one PutObject (`_put_streamed`): at most this many at once (each
# holds a worker thread and a pooled connection for as long as its client sends), the others take the buffered way.
STREAMED_UPLOADS = 8
PIPE_BYTES = 2 * 1024 * 1024  # received bytes a streamed upload holds while S3 takes them
_DECLARED = "burrito_declared_sha256"  # request context: the SigV4 payload hash, the body's declared SHA-256
_DECLARED_SIGNER = "burrito-s3v4-declared"


def make_client(
    *,
    endpoint_url: str | None = None,
    region: str | None = None,
    path_style: bool = False,
    max_connections: int = 64,
    boto3_checksums: bool = False,
) -> Any:
    """A boto3 S3 client; credentials come from boto3's usual chain (environment, profile, IRSA, IMDS).

    Every request body is checked by S3 with exactly one checksum, never none (`payload_signed`): over plain http
    botocore always signs the body's SHA-256 into SigV4 (S3 refuses a body that does not match it), so its CRC32 of
    the same bytes (`request_checksum_calculation="when_supported"`, boto3's default) is a second pass for nothing
    and is sent only where an operation requires one; over https botocore sends the body unsigned with its CRC32,
    which then stays. `boto3_checksums`: boto3's defaults whatever the endpoint (the bench's boto3 baseline)."""
    config = Config(
        region_name=region,
        s3={"addressing_style": "path" if path_style else "auto"},
        retries={"mode": "standard", "max_attempts": 5},
        # Many concurrent downloads each hold one pooled connection while they stream.
        max_pool_connections=max_connections,
        request_checksum_calculation=(
            "when_supported" if boto3_checksums or not payload_signed(endpoint_url) else "when_required"
        ),
    )
    return boto3.session.Session().client("s3", endpoint_url=endpoint_url, config=config)


def payload_signed(endpoint_url: str | None) -> bool:
    """Whether botocore signs every request body's SHA-256 into SigV4 for this endpoint: always over plain http
    (`S3SigV4Auth._should_sha256_sign_payload`: a URL not starting with `https`); over https (AWS's own endpoints
    when none is given) it leaves streamed bodies unsigned when a checksum header covers them."""
    return endpoint_url is not None and not endpoint_url.lower().startswith("https")


class _DeclaredPayloadAuth(botocore.auth.S3SigV4Auth):  # type: ignore[misc]  # botocore is untyped
    """botocore's S3 SigV4 signer, whose payload hash of a streamed PutObject is the body's declared SHA-256 instead
    of a pass over the body (which, a stream, cannot be read twice): S3 refuses a body that does not match what the
    signature says, and the datastore hashes every byte it forwards and withdraws a body whose sum differs before
    its last byte is sent (`_put_streamed`). botocore signs such a payload over https too (its checksum header is
    not the one that lets it go unsigned)."""

    def payload(self, request: Any) -> str:
        declared = request.context.get(_DECLARED)
        if declared is not None and not self._is_streaming_checksum_payload(request) \
                and self._should_sha256_sign_payload(request):
            return str(declared)
        return str(super().payload(request))


# A name of its own next to botocore's ("s3v4" stays botocore's), chosen only for a streamed PutObject.
botocore.auth.AUTH_TYPE_MAPS.setdefault(_DECLARED_SIGNER, _DeclaredPayloadAuth)


def _declared_sum(params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
    body = params.get("Body")
    if isinstance(body, _BodyPipe):
        context[_DECLARED] = body.sha256


def _declared_signer(context: dict[str, Any], signing_name: str, **kwargs: Any) -> str | None:
    # botocore's own choice first (it also marks an operation whose payload goes unsigned over https).
    chosen: str | None = botocore.handlers.set_operation_specific_signer(context=context, signing_name=signing_name,
                                                                       **kwargs)
    if _DECLARED not in context:
        return chosen
    if (chosen or kwargs.get("signature_version")) != "s3v4":
        raise RuntimeError(f"a streamed PutObject is signed with SigV4 only, not {chosen}")
    return _DECLARED_SIGNER


def declare_payloads(client: Any) -> bool:
    """Lets `client`'s PutObject take a `_BodyPipe` (idempotent): its SigV4 payload hash is the declared sum.
    False for a client that is not botocore's (a test's stub): its uploads take the buffered way."""
    events = getattr(getattr(client, "meta", None), "events", None)
    if events is None:
        return False
    events.register("before-parameter-build.s3.PutObject", _declared_sum, unique_id="burrito-declared-sum")
    events.register_first("choose-signer.s3.PutObject", _declared_signer, unique_id="burrito-declared-signer")
    return True


class _Withdrawn(Exception):
    """Raised to the thread sending a streamed body when its request failed: the PUT must not complete."""


class _BodyPipe:
    """A request body on its way from the event loop (`put`, `finish`, `fail`) to botocore's sending thread, which
    reads it as a file (`read`), each received piece whole: no part is joined, no byte copied on the way. At most
    `limit` bytes wait in it; the loop's `put` waits for room, and returns False once the reader has stopped (S3
    answered, or the call failed, before the whole body went out)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, sha256: str, limit: int = PIPE_BYTES) -> None:
        self.loop, self.sha256, self.limit = loop, sha256, limit
        self._cond = threading.Condition()
        self._pieces: deque[bytes] = deque()
        self._buffered = 0
        self._ended = False
        self._error: BaseException | None = None
        self._reader_gone = False
        self._room: asyncio.Future[None] | None = None

    async def put(self, piece: bytes) -> bool:
        with self._cond:
            if self._reader_gone:
                return False
            self._pieces.append(piece)
            self._buffered += len(piece)
            self._cond.notify()
            if self._buffered < self.limit:
                return True
            self._room = self.loop.create_future()
            room = self._room
        await room
        return not self._reader_gone

    def finish(self) -> None:
        with self._cond:
            self._ended = True
            self._cond.notify()

    def fail(self, error: BaseException) -> None:
        with self._cond:
            self._error = error
            self._cond.notify()

    def read(self, _size: int = -1) -> bytes:
        """The next received piece (whatever `_size` asks: a file may return fewer bytes, and senders take what
        comes), b"" at the end; raises `_Withdrawn` when the body failed."""
        with self._cond:
            while not self._pieces and not self._ended and self._error is None:
                self._cond.wait()
            if self._error is not None:
                raise _Withdrawn(str(self._error) or type(self._error).__name__)
            if not self._pieces:
                return b""
            piece = self._pieces.popleft()
            self._buffered -= len(piece)
            if self._buffered < self.limit:
                self._wake()
            return piece

    def reader_done(self) -> None:
        """Called by the sending thread when its call returned or raised: the loop stops feeding."""
        with self._cond:
            self._reader_gone = True
            self._pieces.clear()
            self._wake()

    def _wake(self) -> None:
        room, self._room = self._room, None
        if room is not None:
            self.loop.call_soon_threadsafe(_set_result, room)


def _set_result(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


async def _in_thread(call: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    return await anyio.to_thread.run_sync(lambda: call(*args, **kwargs))


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def _take(pending: deque[bytes], size: int) -> bytearray:
    """The first `size` bytes of `pending`, copied once (only the chunk at the cut is split).

    A bytearray, not bytes: botocore wraps a bytes body in a BytesIO, which urllib3 then sends 16 KiB at a time
    (a copy per read) after an `Expect: 100-continue` round trip, and which the SigV4 payload hash reads in more
    copies; a bytearray is hashed in place and handed to one `sendall` (issue 31)."""
    parts, taken = [], 0
    while taken < size:
        chunk = pending.popleft()
        if len(chunk) > size - taken:
            pending.appendleft(chunk[size - taken :])
            chunk = chunk[: size - taken]
        parts.append(chunk)
        taken += len(chunk)
    return bytearray().join(parts)


class S3Storage:
    """Objects under `prefix` in `bucket`; keys are the datastore's keys, checked like the filesystem's."""

    def __init__(
        self,
        client: Any,
        bucket: str,
        prefix: str = "",
        part_size: int = DEFAULT_PART_SIZE,
        concurrency: int = DEFAULT_CONCURRENCY,
    ) -> None:
        if not bucket:
            raise ValueError("s3 bucket: must not be empty")
        if part_size < MIN_PART_SIZE:
            raise ValueError(f"s3 part size: {part_size} is below S3's minimum of {MIN_PART_SIZE} bytes")
        if concurrency < 1:
            raise ValueError(f"s3 upload concurrency: expected at least 1, got {concurrency}")
        self.client, self.bucket, self.part_size, self.concurrency = client, bucket, part_size, concurrency
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
        self.streams = declare_payloads(client)
        self.streaming = 0  # streamed uploads in progress
        self._stream_threads = anyio.CapacityLimiter(STREAMED_UPLOADS)  # theirs, apart from the reads' threads

    def _key(self, key: str) -> str:
        return self.prefix + check_key(key)

    async def put(self, key: str, chunks: AsyncIterator[bytes], max_size: int, *, once: bool = False,
                  describe: Describe | None = None, expected: ObjectInfo | None = None) -> Stored:
        target = self._key(key)
        if expected is not None and describe is None and expected.size <= MAX_PUT and self.streams \
                and self.streaming < STREAMED_UPLOADS:
            return await self._put_streamed(key, target, chunks, max_size, once, expected)
        pending: deque[bytes] = deque()
        buffered = 0
        hashing = Hashing(max_size, hashed=describe is None)
        condition = {"IfNoneMatch": "*"} if once else {}
        # A body whose sum the client declared goes straight to its key, the sum in the upload's metadata from the
        # start (checked before the upload is completed): half the work of staging it and copying it (issue 31).
        direct = expected is not None
        staging = target if direct else f"{self.prefix}{STAGING}/{uuid.uuid4().hex}"
        upload = _Multipart(self.client, self.bucket, staging, self.concurrency,
                            _metadata(expected) if expected is not None else None)
        try:
            async for chunk in chunks:
                pending.append(hashing.add(chunk))
                buffered += len(chunk)
                # Strictly more than a part: the last part then always has at least one byte.
                while buffered > self.part_size:
                    await upload.send(_take(pending, self.part_size))
                    buffered -= self.part_size
            body = bytearray().join(pending)  # a bytearray, as `_take` says why
            info = describe() if describe is not None else hashing.info()
            check_expected(expected, info)
            metadata = _metadata(info)
            try:
                if upload.started and direct:
                    await upload.send(body)
                    await upload.complete(condition)
                elif upload.started:
                    await upload.send(body)
                    await upload.complete({})
                    await self._copy_into(staging, target, hashing.size, metadata, condition)
                else:
                    await _in_thread(self.client.put_object, Bucket=self.bucket, Key=target, Body=body,
                                     Metadata=metadata, **condition)
            except ClientError as exc:
                if _code(exc) not in _PRECONDITION:
                    raise
                with anyio.CancelScope(shield=True):
                    await upload.abort()  # a direct upload refused by its condition is still open
                existing = await self.stat(key)
                if existing is not None and existing.sha256 == info.sha256:
                    return Stored(info.size, info.sha256, created=False)
                raise Exists(key, existing.sha256 if existing is not None else "unknown") from None
            return Stored(info.size, info.sha256)
        except BaseException:
            # Shielded: the abort must run even when the request task is being cancelled.
            with anyio.CancelScope(shield=True):
                await upload.abort()
            raise
        finally:
            if upload.completed and not direct:
                with anyio.CancelScope(shield=True):
                    try:
                        await _in_thread(self.client.delete_object, Bucket=self.bucket, Key=staging)
                    except (ClientError, BotoCoreError) as exc:  # the sweep removes it later
                        log.warning("could not delete the staging object %s: %s", staging, exc)

    async def _put_streamed(self, key: str, target: str, chunks: AsyncIterator[bytes], max_size: int, once: bool,
                            expected: ObjectInfo) -> Stored:
        """A body whose sum and size the client declared, forwarded to S3 as it arrives, as one PutObject (issue 31):
        no part joined, no multipart upload, no second pass over the bytes for the signature, whose payload hash is
        the declared sum (`_DeclaredPayloadAuth`), as is the `x-amz-checksum-sha256` sent with it (which also keeps
        botocore from computing a CRC32 of the stream over https): S3 takes only a body with that sum. The
        datastore still hashes every byte and holds the last piece back until the whole body's sum is checked: a
        body that differs from what was declared (or one that ends early) is withdrawn, its PUT broken off before
        its last byte, so S3 never completes it (moto does not check the signed sum: the hold-back is what the
        tests see). When S3 answers before the body is all sent (a refused condition, an error), the rest is still
        read and hashed, so the answer is the one the buffered way gives. Not retried by botocore (a stream cannot
        be sent twice): a failed PUT is the request's 5xx, which the datastore's clients retry."""
        hashing = Hashing(max_size)
        pipe = _BodyPipe(asyncio.get_running_loop(), expected.sha256)
        condition = {"IfNoneMatch": "*"} if once else {}
        checksum = base64.b64encode(bytes.fromhex(expected.sha256)).decode()

        def send() -> Any:
            try:
                return self.client.put_object(Bucket=self.bucket, Key=target, Body=pipe, ContentLength=expected.size,
                                              ChecksumSHA256=checksum, Metadata=_metadata(expected), **condition)
            finally:
                pipe.reader_done()

        self.streaming += 1
        sending = asyncio.ensure_future(anyio.to_thread.run_sync(send, limiter=self._stream_threads))
        try:
            try:
                reading, held = True, b""
                async for chunk in chunks:
                    if not chunk:
                        continue
                    hashing.add(chunk)
                    if held and reading:
                        reading = await pipe.put(held)
                    held = chunk
                check_expected(expected, hashing.info())
                if held and reading:
                    await pipe.put(held)
                pipe.finish()
            except BaseException as exc:
                pipe.fail(exc)
                with anyio.CancelScope(shield=True):
                    await asyncio.wait([sending])
                if not sending.cancelled():
                    sending.exception()  # retrieved: the body's own failure is the one that counts
                raise
            try:
                await asyncio.shield(sending)
            except ClientError as exc:
                if _code(exc) not in _PRECONDITION:
                    raise
                existing = await self.stat(key)
                if existing is not None and existing.sha256 == expected.sha256:
                    return Stored(expected.size, expected.sha256, created=False)
                raise Exists(key, existing.sha256 if existing is not None else "unknown") from None
            return Stored(expected.size, expected.sha256)
        finally:
            self.streaming -= 1

    async def _copy_into(self, staging: str, target: str, size: int, metadata: dict[str, str],
                         condition: dict[str, str]) -> None:
        """The staged body as `target`, with its metadata, made visible at once by one CompleteMultipartUpload
        (conditional when `condition` says so)."""
        created = await _in_thread(self.client.create_multipart_upload, Bucket=self.bucket, Key=target,
                                   Metadata=metadata)
        upload_id = created["UploadId"]
        try:
            parts = []
            for number, start in enumerate(range(0, size, MAX_COPY_PART), start=1):
                last = min(start + MAX_COPY_PART, size) - 1
                copied = await _in_thread(
                    self.client.upload_part_copy, Bucket=self.bucket, Key=target, UploadId=upload_id,
                    PartNumber=number, CopySource={"Bucket": self.bucket, "Key": staging},
                    CopySourceRange=f"bytes={start}-{last}")
                parts.append({"PartNumber": number, "ETag": copied["CopyPartResult"]["ETag"]})
            await _in_thread(self.client.complete_multipart_upload, Bucket=self.bucket, Key=target,
                             UploadId=upload_id, MultipartUpload={"Parts": parts}, **condition)
        except BaseException:
            with anyio.CancelScope(shield=True):
                try:
                    await _in_thread(self.client.abort_multipart_upload, Bucket=self.bucket, Key=target,
                                     UploadId=upload_id)
                except (ClientError, BotoCoreError) as exc:
                    log.warning("could not abort the copy into %s: %s", target, exc)
            raise

    @staticmethod
    def _info(response: dict[str, Any]) -> ObjectInfo | None:
        metadata = {k.lower(): v for k, v in (response.get("Metadata") or {}).items()}
        sha, size = metadata.get(SHA_META), metadata.get(SIZE_META)
        if sha and size and size.isdigit():
            return ObjectInfo(sha, int(size))
        return None

    async def read(self, key: str) -> Opened | None:
        response = await self._get(key, first=True)
        if response is None:
            return None
        info = self._info(response)
        if info is None:  # stored before sums were kept: computed from another read
            response["Body"].close()
            info = await self._computed(key)
            if info is None:
                return None
            return await self._reopen(key, info)
        return Opened(info, _stream(response["Body"], response[_FIRST], response.get("ContentLength")))

    async def _reopen(self, key: str, info: ObjectInfo) -> Opened | None:
        stream = await self.open(key)
        return Opened(info, stream) if stream is not None else None

    async def _computed(self, key: str) -> ObjectInfo | None:
        stream = await self.open(key)
        if stream is None:
            return None
        digest, size = hashlib.sha256(), 0
        async for chunk in stream:
            digest.update(chunk)
            size += len(chunk)
        return ObjectInfo(digest.hexdigest(), size, recorded=False)

    async def open(self, key: str) -> AsyncIterator[bytes] | None:
        response = await self._get(key)
        return _stream(response["Body"]) if response is not None else None

    async def _get(self, key: str, first: bool = False) -> dict[str, Any] | None:
        """The object's GetObject answer (its body not read yet); None when there is none. `first`: the body's
        first chunk is read in the same worker-thread trip (under `_FIRST`), so an object of up to a chunk costs
        one thread hop, not three."""
        target = self._key(key)

        def get() -> dict[str, Any]:
            response: dict[str, Any] = self.client.get_object(Bucket=self.bucket, Key=target)
            if first:
                try:
                    response[_FIRST] = response["Body"].read(CHUNK)
                except BaseException:
                    response["Body"].close()
                    raise
            return response

        try:
            return await _in_thread(get)
        except ClientError as exc:
            if _code(exc) in _MISSING:
                return None
            raise

    async def stat(self, key: str) -> ObjectInfo | None:
        try:
            response = await _in_thread(self.client.head_object, Bucket=self.bucket, Key=self._key(key))
        except ClientError as exc:
            if _code(exc) in _MISSING:
                return None
            raise
        return self._info(response) or await self._computed(key)

    async def exists(self, key: str) -> bool:
        try:
            await _in_thread(self.client.head_object, Bucket=self.bucket, Key=self._key(key))
        except ClientError as exc:
            if _code(exc) in _MISSING:
                return False
            raise
        return True

    async def delete(self, key: str) -> None:
        await _in_thread(self.client.delete_object, Bucket=self.bucket, Key=self._key(key))

    async def delete_many(self, keys: Iterable[str]) -> None:
        """DeleteObjects in batches of at most 1000 keys; a batch that fails, or keys S3 reports as not
        deleted, do not stop the other batches: DeleteFailed names them all at the end."""
        targets = [self._key(key) for key in keys]

        def ours(key: str) -> str:  # the datastore's key, as messages name it
            return key.removeprefix(self.prefix)

        def delete_all() -> list[str]:
            failed: list[str] = []
            for start in range(0, len(targets), DELETE_BATCH):
                batch = targets[start : start + DELETE_BATCH]
                try:
                    response = self.client.delete_objects(
                        Bucket=self.bucket, Delete={"Objects": [{"Key": key} for key in batch], "Quiet": True}
                    )
                except ClientError as exc:
                    failed += [f"{ours(key)} ({_code(exc)})" for key in batch]
                    continue
                except BotoCoreError as exc:  # endpoint unreachable and the like, after boto3's own retries
                    failed += [f"{ours(key)} ({type(exc).__name__})" for key in batch]
                    continue
                failed += [
                    f"{ours(str(error.get('Key', '?')))} ({error.get('Code', 'error')})"
                    for error in response.get("Errors", [])
                ]
            return failed

        failed = await anyio.to_thread.run_sync(delete_all)
        if failed:
            raise DeleteFailed(failed, len(targets))

    async def sizes(self, prefix: str) -> dict[str, int]:
        """Stored bytes per key under the directory-like `prefix`, from the listing (no object is read)."""
        base = prefix.strip("/")
        full = self.prefix + (check_key(base) + "/" if base else "")

        def collect() -> dict[str, int]:
            found: dict[str, int] = {}
            for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=full):
                for item in page.get("Contents", []):
                    found[item["Key"][len(self.prefix) :]] = int(item.get("Size") or 0)
            return found

        return await anyio.to_thread.run_sync(collect)

    async def list(self, prefix: str) -> list[str]:
        """Keys under the directory-like `prefix` (`a/b` lists `a/b/...`, never `a/bc`); `""` lists all."""
        base = prefix.strip("/")
        full = self.prefix + (check_key(base) + "/" if base else "")

        def collect() -> list[str]:
            keys: list[str] = []
            for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=full):
                keys.extend(item["Key"][len(self.prefix) :] for item in page.get("Contents", []))
            return sorted(keys)

        return await anyio.to_thread.run_sync(collect)

    async def abort_stale_uploads(self, older_than: timedelta, now: datetime) -> int:
        """Abort multipart uploads left behind by a process that died mid-upload (they are invisible but
        cost storage), and delete staged bodies whose copy never happened; returns how many."""

        def sweep() -> int:
            aborted = 0
            paginator = self.client.get_paginator("list_multipart_uploads")
            for page in paginator.paginate(Bucket=self.bucket, Prefix=self.prefix):
                for upload in page.get("Uploads", []):
                    if now - upload["Initiated"] >= older_than:
                        self.client.abort_multipart_upload(
                            Bucket=self.bucket, Key=upload["Key"], UploadId=upload["UploadId"]
                        )
                        aborted += 1
            # Staged bodies whose copy never finished (their datastore was killed in between).
            staged = self.client.get_paginator("list_objects_v2")
            for page in staged.paginate(Bucket=self.bucket, Prefix=f"{self.prefix}{STAGING}/"):
                for item in page.get("Contents", []):
                    if now - item["LastModified"] >= older_than:
                        self.client.delete_object(Bucket=self.bucket, Key=item["Key"])
                        aborted += 1
            return aborted

        return await anyio.to_thread.run_sync(sweep)


class _Multipart:
    """One multipart upload, started lazily by the first full part (with `metadata`); at most `concurrency` parts
    in flight."""

    def __init__(self, client: Any, bucket: str, key: str, concurrency: int,
                 metadata: dict[str, str] | None = None) -> None:
        self.client, self.bucket, self.key, self.concurrency = client, bucket, key, concurrency
        self.metadata = metadata
        self.upload_id: str | None = None
        self.parts: list[dict[str, Any]] = []
        self.in_flight: list[asyncio.Task[None]] = []
        self._completed = self._aborted = False

    @property
    def started(self) -> bool:
        return self.upload_id is not None

    @property
    def completed(self) -> bool:
        return self._completed

    async def send(self, data: bytearray) -> None:
        if self.upload_id is None:
            extra = {"Metadata": self.metadata} if self.metadata is not None else {}
            created = await _in_thread(self.client.create_multipart_upload, Bucket=self.bucket, Key=self.key,
                                       **extra)
            self.upload_id = created["UploadId"]
        while len(self.in_flight) >= self.concurrency:
            await self._drain_one()
        number = len(self.parts) + 1
        self.parts.append({"PartNumber": number})
        self.in_flight.append(asyncio.ensure_future(self._upload(number, data)))

    async def _upload(self, number: int, data: bytearray) -> None:
        result = await _in_thread(
            self.client.upload_part,
            Bucket=self.bucket, Key=self.key, UploadId=self.upload_id, PartNumber=number, Body=data,
        )
        self.parts[number - 1]["ETag"] = result["ETag"]

    async def _drain_one(self) -> None:
        task = self.in_flight.pop(0)
        await task

    async def _drain(self) -> None:
        while self.in_flight:
            await self._drain_one()

    async def complete(self, condition: dict[str, str]) -> None:
        await self._drain()
        await _in_thread(
            self.client.complete_multipart_upload,
            Bucket=self.bucket, Key=self.key, UploadId=self.upload_id, MultipartUpload={"Parts": self.parts},
            **condition,
        )
        self._completed = True

    async def abort(self) -> None:
        if self._completed or self._aborted:
            return  # a completed staging upload is an object: `put` deletes it
        if self.in_flight:
            # Let the parts in flight finish (or fail) first, so the abort is the last word on this upload.
            await asyncio.gather(*self.in_flight, return_exceptions=True)
            self.in_flight = []
        if self.upload_id is None:
            return
        self._aborted = True
        try:
            await _in_thread(
                self.client.abort_multipart_upload, Bucket=self.bucket, Key=self.key, UploadId=self.upload_id
            )
        except ClientError as exc:  # the upload stays invisible; a lifecycle rule or the sweep removes it
            log.warning("could not abort the multipart upload of %s: %s", self.key, _code(exc))


def _metadata(info: ObjectInfo) -> dict[str, str]:
    return {SHA_META: info.sha256, SIZE_META: str(info.size)}


async def _stream(body: Any, first: bytes = b"", size: int | None = None) -> AsyncIterator[bytes]:
    """An S3 body, read in chunks off the event loop, closed when done or abandoned. `first`: its first chunk,
    already read; when that is all of its `size`, no more reads (no more thread hops).

    One read ahead: while a chunk goes out to the client, the next one is read from S3 in a worker thread, so the
    two legs overlap instead of taking turns (issue 31; memory: one more chunk per download)."""
    ahead: asyncio.Future[bytes] | None = None
    try:
        if size is not None and len(first) >= size:
            if first:
                yield first
            return
        if first:
            ahead = asyncio.ensure_future(_in_thread(body.read, CHUNK))
            yield first
        while True:
            chunk = await (ahead if ahead is not None else _in_thread(body.read, CHUNK))
            ahead = None
            if not chunk:
                return
            ahead = asyncio.ensure_future(_in_thread(body.read, CHUNK))
            yield chunk
    finally:
        if ahead is not None and not ahead.done():
            # Never closed under a reading thread: the read in flight closes it when it ends (a cancelled wait
            # on a worker thread ends only when the thread does).
            ahead.add_done_callback(lambda done: _closed_after(done, body))
        else:
            if ahead is not None and not ahead.cancelled():
                ahead.exception()  # retrieved: a failed read-ahead nobody waits for is no error
            body.close()


def _closed_after(done: asyncio.Future[bytes], body: Any) -> None:
    if not done.cancelled():
        done.exception()
    body.close()
