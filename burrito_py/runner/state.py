"""Managed state (docs/architecture.md §9, §10.6): the runner points Terraform's `http` backend at the datastore.

A layer with `spec.state.managed` (or its repository's default) declares no backend: the runner writes
`burrito_py_backend_override.tf` (`terraform { backend "http" {} }`; an override file, so it adds the backend
without touching the layer's own files) and gives `init` the addresses as `-backend-config` arguments. The
credentials go in the environment only (`TF_HTTP_USERNAME`, `TF_HTTP_PASSWORD`: the runner's own datastore token),
which Terraform neither prints nor stores in `.terraform/`: the layer's code holds no secret and no address.

A layer whose code declares a backend (or a `cloud` block) while managed state is asked for is refused before
`init`: which state would be meant is ambiguous, and an override would silently move it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "OVERRIDE_FILE",
    "STATE_FIELD",
    "ManagedBackend",
    "ManagedStateError",
    "backend_config_args",
    "declared_backends",
    "managed_backend",
]

OVERRIDE_FILE = "burrito_py_backend_override.tf"
STATE_FIELD = "spec.state.managed"
OVERRIDE = '# Written by burrito-py: this layer\'s state lives in the burrito-py datastore (spec.state.managed).\n' \
           'terraform {\n  backend "http" {}\n}\n'
# Any file that might declare one; only these are parsed (parsing a large file with python-hcl2 takes seconds).
_MENTION = re.compile(r"\b(backend|cloud)\b")
USERNAME = "burrito-py-runner"  # Terraform sends basic auth only when a username is set; the datastore ignores it


class ManagedStateError(Exception):
    """The layer asks for managed state but its code cannot have it; the message names the field and the file."""


@dataclass(frozen=True)
class ManagedBackend:
    init_args: list[str]
    env: dict[str, str] = field(default_factory=dict)


def _unquote(value: object) -> str:
    text = str(value).strip()
    return text[1:-1] if len(text) >= 2 and text[0] == text[-1] == '"' else text


def _blocks(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value] if isinstance(value, dict) else []


def _declared(terraform_blocks: Any) -> list[str]:
    found: list[str] = []
    for block in _blocks(terraform_blocks):
        if not isinstance(block, dict):
            continue
        for backend in _blocks(block.get("backend")):
            labels = list(backend) if isinstance(backend, dict) else []
            found += [f'backend "{_unquote(label)}"' for label in labels] or ["backend"]
        if block.get("cloud") is not None:
            found.append("cloud")
    return found


def declared_backends(layer_dir: Path, kind: str = "terraform") -> list[str]:
    """`<file>: backend "<type>"` (or `cloud`) for every backend the layer's own code declares, override files
    included (they can set one too); our own override file is not the layer's."""
    import hcl2  # ~0.1 s to import; only managed layers pay it

    patterns = ["*.tf", "*.tf.json"] + (["*.tofu", "*.tofu.json"] if kind == "opentofu" else [])
    files = sorted({p for pattern in patterns for p in layer_dir.glob(pattern) if p.is_file()})
    found: list[str] = []
    for path in files:
        if path.name == OVERRIDE_FILE:
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ManagedStateError(f"{STATE_FIELD}: cannot read {path.name} to look for a backend: {exc}") from None
        if not _MENTION.search(text):
            continue
        try:
            parsed = json.loads(text) if path.name.endswith(".json") else hcl2.loads(text)
        except Exception as exc:  # lark raises many exception types; all mean "not HCL"
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ManagedStateError(f"{STATE_FIELD}: cannot parse {path.name} to look for a backend: {first}") from None
        if isinstance(parsed, dict):
            found += [f"{path.name}: {what}" for what in _declared(parsed.get("terraform"))]
    return found


def backend_config_args(datastore_url: str, namespace: str, layer: str) -> list[str]:
    """`init`'s `-backend-config` arguments: where the layer's state and its lock are (no secret)."""
    address = f"{datastore_url.rstrip('/')}/api/v1/layers/{namespace}/{layer}/state"
    return [
        f"-backend-config=address={address}",
        f"-backend-config=lock_address={address}/lock",
        f"-backend-config=unlock_address={address}/lock",
        "-backend-config=lock_method=LOCK",
        "-backend-config=unlock_method=UNLOCK",
        "-backend-config=update_method=POST",
    ]


def managed_backend(layer_dir: Path, kind: str, datastore_url: str, namespace: str, layer: str,
                    token: str | None) -> ManagedBackend:
    """Check the code declares no backend, write the override file, and say how `init` and every step run."""
    declared = declared_backends(layer_dir, kind)
    if declared:
        raise ManagedStateError(
            f"{STATE_FIELD} is true, but the layer's code declares its own backend ({'; '.join(declared)}): remove "
            f"it (burrito-py then configures the datastore's http backend), or unset {STATE_FIELD}")
    (layer_dir / OVERRIDE_FILE).write_text(OVERRIDE, encoding="utf-8")
    env = {"TF_HTTP_USERNAME": USERNAME, "TF_HTTP_PASSWORD": token} if token else {}
    return ManagedBackend(backend_config_args(datastore_url, namespace, layer), env)
