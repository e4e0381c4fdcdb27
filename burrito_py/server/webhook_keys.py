"""The webhook keys the controllers publish for the server (docs/architecture.md §11.1): pure.

The server reads no repository Secret. The repository controller, which reads each repository's Secret anyway
(git credentials), writes the key that verifies its webhooks into one Secret of the release namespace per
controllers Deployment (`webhook_keys_secret`), which only the server may read, by name. One data entry per
repository: `<namespace>.<name>` (namespaces hold no dot, so the split is unambiguous) →
`<uid>:<base64url key>`.

The key is what HMAC-SHA256 itself keys with: the `webhookSecret`, or its SHA-256 when longer than the hash's
64-byte block (RFC 2104; `hmac.new` does the same), so an entry is at most ~130 bytes whatever a tenant puts in
its Secret. GitHub and Gitea sign the body with the secret: the same HMAC under this key. GitLab sends the secret
itself (`X-Gitlab-Token`): it verifies when `hmac_key(token)` equals the key, compared in constant time. The uid
ties the entry to one repository object: a repository deleted and created again under its name is not verified
by the old one's entry.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from burrito_py.gitproviders.base import hmac_key

__all__ = ["MAX_SECRET_BYTES", "PublishedKey", "decode_entries", "encode_entry", "entry_name", "hmac_key",
           "parse_entry_name"]

MAX_SECRET_BYTES = 1024 * 1024  # a Secret's own limit


@dataclass(frozen=True, slots=True)
class PublishedKey:
    uid: str
    key: bytes


def entry_name(namespace: str, name: str) -> str:
    return f"{namespace}.{name}"


def parse_entry_name(entry: str) -> tuple[str, str] | None:
    namespace, dot, name = entry.partition(".")
    return (namespace, name) if dot and namespace and name else None


def encode_entry(uid: str, secret: bytes) -> str:
    """The Secret `data` value (base64, as the API stores data) of a repository's entry."""
    raw = f"{uid}:{base64.urlsafe_b64encode(hmac_key(secret)).decode()}".encode()
    return base64.b64encode(raw).decode()


def decode_entries(secret: Mapping[str, Any] | None) -> dict[tuple[str, str], PublishedKey]:
    """The entries of a published Secret's body; malformed entries are skipped (they verify nothing)."""
    out: dict[tuple[str, str], PublishedKey] = {}
    for entry, value in ((secret or {}).get("data") or {}).items():
        where = parse_entry_name(str(entry))
        if where is None or not isinstance(value, str):
            continue
        try:
            uid, colon, key = base64.b64decode(value, validate=True).decode().partition(":")
            decoded = base64.urlsafe_b64decode(key.encode())
        except (binascii.Error, UnicodeDecodeError, ValueError):
            continue
        if colon and uid and decoded:
            out[where] = PublishedKey(uid, decoded)
    return out
