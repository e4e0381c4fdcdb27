"""OpenPGP detached signatures of `SHA256SUMS`, checked with GnuPG's `gpgv` against the keys a registry names.

`gpgv` only verifies (no keyring state, no agent); the registry's ASCII-armoured keys are de-armoured here into a
throw-away keyring file. A registry that offers a signature must offer a key that verifies it: anything else is
refused (fail closed).
"""

from __future__ import annotations

import base64
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

__all__ = ["SignatureError", "dearmor", "verify_detached"]


class SignatureError(ValueError):
    """A signature that does not verify, or that cannot be checked."""


def dearmor(armored: str) -> bytes:
    """The binary packets of an ASCII-armoured OpenPGP block (RFC 4880 §6.2; the CRC line is left to gpgv's own
    packet checks)."""
    lines = armored.strip().splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if line.startswith("-----BEGIN PGP"))
        end = next(i for i, line in enumerate(lines) if line.startswith("-----END PGP"))
    except StopIteration:
        raise SignatureError("not an ASCII-armoured OpenPGP block") from None
    body = lines[start + 1 : end]
    while body and body[0].strip():  # armour headers ("Version: …") end at the first blank line
        if ":" not in body[0]:
            break
        body = body[1:]
    data = [line.strip() for line in body if line.strip() and not line.startswith("=")]
    try:
        return base64.b64decode("".join(data), validate=True)
    except ValueError as exc:
        raise SignatureError(f"the armoured block is not base64: {exc}") from None


def verify_detached(data: bytes, signature: bytes, armored_keys: Sequence[str]) -> None:
    """Raise SignatureError unless `signature` (binary or armoured) is a valid signature of `data` by one of
    `armored_keys`."""
    gpgv = shutil.which("gpgv")
    if gpgv is None:
        raise SignatureError("gpgv is not installed: the signature cannot be checked")
    if not armored_keys:
        raise SignatureError("the registry signs SHA256SUMS but names no key to check it with")
    with tempfile.TemporaryDirectory(prefix="burrito-py-gpgv-") as tmp:
        keyring, sig_file, data_file = Path(tmp) / "keys.gpg", Path(tmp) / "data.sig", Path(tmp) / "data"
        keyring.write_bytes(b"".join(dearmor(key) for key in armored_keys))
        sig_file.write_bytes(dearmor(signature.decode()) if signature.lstrip().startswith(b"-----BEGIN") else signature)
        data_file.write_bytes(data)
        result = subprocess.run(
            [gpgv, "--homedir", tmp, "--keyring", str(keyring), str(sig_file), str(data_file)],
            capture_output=True, text=True, timeout=30, check=False,
        )
    if result.returncode != 0:
        lines = result.stderr.strip().splitlines()
        reason = next((line for line in lines if "BAD" in line or "Can't" in line or "No public key" in line),
                      lines[-1] if lines else f"gpgv exited {result.returncode}")
        raise SignatureError(f"SHA256SUMS signature does not verify: {reason}")
