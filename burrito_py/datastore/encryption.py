"""Encryption at rest: any `Storage` wrapped so objects are AES-256-GCM encrypted, streamed chunk by chunk.

Object format (all integers big-endian)::

    header = b"BPYE" | version (1) | key-id length (1) | key id | nonce prefix (7 random bytes) | chunk size (4)
    body   = chunk* where chunk = AES-GCM(plaintext[i * chunk size : (i + 1) * chunk size]) incl. its 16-byte tag

Each chunk's nonce is ``prefix | index (4) | final flag (1)`` (the STREAM construction): dropping, reordering
or truncating chunks, or appending after the final one, makes a tag check fail. The associated data binds
every chunk to the header (so the key id cannot be swapped) and to the object's storage key (so ciphertexts
cannot be moved between objects). The key id in the header is what makes rotation work: new objects use the
active key, old ones decrypt with the key they name, as long as the Secret still holds it.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import struct
from collections.abc import AsyncIterator, Iterable, Mapping
from dataclasses import dataclass

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from burrito_py.datastore.storage import Describe, Hashing, ObjectInfo, Opened, Storage, Stored, TooLarge

MAGIC = b"BPYE"
VERSION = 1
KEY_BYTES = 32
TAG_BYTES = 16
PREFIX_BYTES = 7
DEFAULT_CHUNK = 256 * 1024
MAX_CHUNK = 16 * 1024 * 1024
_MAX_CHUNKS = 2**32  # the index has 4 bytes in the nonce
_KEY_ID = re.compile(r"^[-._a-zA-Z0-9]{1,253}$")  # what a Secret's data key may be


class EncryptionError(Exception):
    """A key problem or a stored object that fails authentication; never carries key material."""


@dataclass(frozen=True)
class Keyring:
    """Keys by id, and the one new objects are written with."""

    keys: Mapping[str, bytes]
    active: str

    def __post_init__(self) -> None:
        for key_id, key in self.keys.items():
            if not _KEY_ID.fullmatch(key_id):
                raise EncryptionError(f"encryption key id {key_id!r}: expected letters, digits, '-', '.' or '_'")
            if len(key) != KEY_BYTES:
                raise EncryptionError(f"encryption key {key_id!r}: expected {KEY_BYTES} bytes, got {len(key)}")
        if self.active not in self.keys:
            known = ", ".join(sorted(self.keys)) or "none"
            raise EncryptionError(f"active encryption key id {self.active!r} is not among the keys ({known})")

    @classmethod
    def from_secret_data(cls, data: Mapping[str, str], active: str, where: str) -> Keyring:
        """`data` as a Secret holds it: base64 of each 32-byte key, by key id; `where` names the Secret."""
        keys: dict[str, bytes] = {}
        for key_id, encoded in data.items():
            try:
                keys[key_id] = base64.b64decode(encoded, validate=True)
            except (binascii.Error, ValueError):
                raise EncryptionError(f"{where} key {key_id!r}: not valid base64") from None
        try:
            return cls(keys, active)
        except EncryptionError as exc:
            raise EncryptionError(f"{where}: {exc}") from None


def _header(key_id: str, prefix: bytes, chunk: int) -> bytes:
    encoded = key_id.encode()
    return MAGIC + bytes([VERSION, len(encoded)]) + encoded + prefix + struct.pack(">I", chunk)


def _nonce(prefix: bytes, index: int, final: bool) -> bytes:
    if index >= _MAX_CHUNKS:
        raise EncryptionError("object too large for the encrypted format")
    return prefix + struct.pack(">IB", index, 1 if final else 0)


class EncryptedStorage:
    """Encrypts on `put`, decrypts on `open`; listing, existence and deletion pass through."""

    def __init__(self, inner: Storage, keyring: Keyring, chunk_size: int = DEFAULT_CHUNK) -> None:
        if not 1 <= chunk_size <= MAX_CHUNK:
            raise ValueError(f"encryption chunk size: expected 1..{MAX_CHUNK}, got {chunk_size}")
        self.inner, self.keyring, self.chunk_size = inner, keyring, chunk_size

    def overhead(self, size: int) -> int:
        """Most bytes the format adds to a `size`-byte object (bounds the inner storage's limit)."""
        return len(_header(self.keyring.active, bytes(PREFIX_BYTES), 0)) + TAG_BYTES * (size // self.chunk_size + 1)

    async def put(self, key: str, chunks: AsyncIterator[bytes], max_size: int, *, once: bool = False,
                  describe: Describe | None = None, expected: ObjectInfo | None = None) -> Stored:
        """The plaintext's sum and size are what the inner storage records (and what `once` compares): the
        ciphertext of the same bytes differs on every write (a fresh nonce)."""
        key_id = self.keyring.active
        aead = AESGCM(self.keyring.keys[key_id])
        prefix = os.urandom(PREFIX_BYTES)
        header = _header(key_id, prefix, self.chunk_size)
        aad = header + key.encode()
        plain = Hashing(max_size)

        async def sealed() -> AsyncIterator[bytes]:
            yield header
            pending, index, chunk = bytearray(), 0, self.chunk_size
            async for data in chunks:
                pending += plain.add(data)
                # Only a chunk known not to be the last is sealed here; the last one carries the final flag.
                while len(pending) > chunk:
                    yield aead.encrypt(_nonce(prefix, index, False), bytes(pending[:chunk]), aad)
                    del pending[:chunk]
                    index += 1
            yield aead.encrypt(_nonce(prefix, index, True), bytes(pending), aad)

        try:
            # `expected` is the plaintext's, as what the inner storage records (`describe`) is.
            return await self.inner.put(key, sealed(), max_size + self.overhead(max_size), once=once,
                                        describe=describe or plain.info, expected=expected)
        except TooLarge:
            raise TooLarge(max_size) from None

    async def read(self, key: str) -> Opened | None:
        opened = await self.inner.read(key)
        if opened is None:
            return None
        stream = await self._decrypting(key, opened.stream)
        if opened.info.recorded:
            return Opened(opened.info, stream)
        # Stored before sums were kept: the inner sum is the ciphertext's; the plaintext's needs a full read.
        await _close(stream)
        info = await self._plaintext_info(key)
        reopened = await self.open(key)
        return Opened(info, reopened) if info is not None and reopened is not None else None

    async def stat(self, key: str) -> ObjectInfo | None:
        info = await self.inner.stat(key)
        if info is None or info.recorded:
            return info
        return await self._plaintext_info(key)

    async def _plaintext_info(self, key: str) -> ObjectInfo | None:
        stream = await self.open(key)
        if stream is None:
            return None
        digest = Hashing(2**63)
        async for chunk in stream:
            digest.add(chunk)
        info = digest.info()
        return ObjectInfo(info.sha256, info.size, recorded=False)

    async def sizes(self, prefix: str) -> dict[str, int]:
        return await self.inner.sizes(prefix)

    async def open(self, key: str) -> AsyncIterator[bytes] | None:
        stream = await self.inner.open(key)
        return None if stream is None else await self._decrypting(key, stream)

    async def _decrypting(self, key: str, stream: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        """The header and the first chunk are read and checked here, so a foreign object, an unknown key id
        or a damaged first chunk fails before any response starts; later chunks are checked as they stream."""
        reader = _Reader(stream)
        await reader.fill(6)
        if len(reader.buffer) < 6 or bytes(reader.buffer[:4]) != MAGIC:
            raise EncryptionError(f"object {key} is not in the encrypted format")
        if reader.buffer[4] != VERSION:
            raise EncryptionError(f"object {key}: unknown encryption format version {reader.buffer[4]}")
        header_size = 6 + reader.buffer[5] + PREFIX_BYTES + 4
        await reader.fill(header_size - 1)
        if len(reader.buffer) < header_size:
            raise EncryptionError(f"object {key}: truncated header")
        header = reader.take(header_size)
        key_id = header[6 : 6 + header[5]].decode(errors="replace")
        secret = self.keyring.keys.get(key_id)
        if secret is None:
            raise EncryptionError(f"object {key} was encrypted with key id {key_id!r}, which is not configured")
        (chunk,) = struct.unpack(">I", header[-4:])
        if not 1 <= chunk <= MAX_CHUNK:
            raise EncryptionError(f"object {key}: invalid chunk size in header")
        prefix = header[header_size - 4 - PREFIX_BYTES : header_size - 4]
        body = self._decrypt(key, reader, AESGCM(secret), header + key.encode(), prefix, chunk + TAG_BYTES)
        # The first chunk is authenticated here, before any response starts: a damaged object whose first
        # chunk fails is an error status, never a 200 cut short (later chunks can only fail mid-stream).
        first = await anext(body)
        return _prepended(first, body)

    @staticmethod
    async def _decrypt(
        key: str, reader: _Reader, aead: AESGCM, aad: bytes, prefix: bytes, unit: int
    ) -> AsyncIterator[bytes]:
        index = 0
        try:
            while await reader.fill(unit):  # more than one unit buffered: the first one is not the last
                yield aead.decrypt(_nonce(prefix, index, False), reader.take(unit), aad)
                index += 1
            if len(reader.buffer) < TAG_BYTES:
                raise EncryptionError(f"object {key}: truncated")
            yield aead.decrypt(_nonce(prefix, index, True), reader.take(len(reader.buffer)), aad)
        except InvalidTag:
            message = f"object {key} failed authentication at chunk {index}: tampered or truncated"
            raise EncryptionError(message) from None
        finally:
            await reader.close()

    async def exists(self, key: str) -> bool:
        return await self.inner.exists(key)

    async def delete(self, key: str) -> None:
        await self.inner.delete(key)

    async def delete_many(self, keys: Iterable[str]) -> None:
        await self.inner.delete_many(keys)  # nothing is read, so nothing is decrypted

    async def list(self, prefix: str) -> list[str]:
        return await self.inner.list(prefix)


async def _close(stream: AsyncIterator[bytes]) -> None:
    aclose = getattr(stream, "aclose", None)
    if aclose is not None:
        await aclose()


async def _prepended(first: bytes, rest: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    yield first
    async for chunk in rest:
        yield chunk


class _Reader:
    """Buffers an async byte stream so it can be cut into fixed-size units."""

    def __init__(self, stream: AsyncIterator[bytes]) -> None:
        self.stream, self.buffer, self.ended = stream, bytearray(), False

    async def fill(self, size: int) -> bool:
        """Read until more than `size` bytes are buffered; False when the stream ends first."""
        while len(self.buffer) <= size and not self.ended:
            try:
                self.buffer += await anext(self.stream)
            except StopAsyncIteration:
                self.ended = True
        return len(self.buffer) > size

    def take(self, size: int) -> bytes:
        data = bytes(self.buffer[:size])
        del self.buffer[:size]
        return data

    async def close(self) -> None:
        aclose = getattr(self.stream, "aclose", None)
        if aclose is not None:
            await aclose()
