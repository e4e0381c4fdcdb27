"""The generic webhook's signature: HMAC-SHA256 over the exact body bytes (pure)."""

from __future__ import annotations

import hashlib
import hmac

__all__ = ["DELIVERY_HEADER", "EVENT_HEADER", "SIGNATURE_HEADER", "signature", "verify"]

SIGNATURE_HEADER = "X-Burrito-Py-Signature-256"
EVENT_HEADER = "X-Burrito-Py-Event"
DELIVERY_HEADER = "X-Burrito-Py-Delivery"


def signature(body: bytes, key: bytes) -> str:
    return "sha256=" + hmac.new(key, body, hashlib.sha256).hexdigest()


def verify(body: bytes, header: str | None, key: bytes) -> bool:
    return header is not None and hmac.compare_digest(signature(body, key), header)
