"""Bearer tokens as the toolkit handles them: caches and logs hold a digest, never the token."""

from __future__ import annotations

import hashlib


def token_digest(token: str) -> str:
    """Cache key of a token: its hash, so no cache, log or dump ever holds the token itself."""
    return hashlib.sha256(token.encode()).hexdigest()
