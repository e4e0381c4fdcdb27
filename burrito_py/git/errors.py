"""The error both credential modules raise (git/credentials.py, git/allowed_hosts.py)."""

from __future__ import annotations


class CredentialsError(ValueError):
    """The Secret cannot give credentials for the URL. The message names the Secret and key, never a value."""
