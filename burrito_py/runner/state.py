"""Managed state (docs/architecture.md §9, §10.6): the runner points Terraform's `http` backend at the datastore.

A layer with `spec.state.managed` (or its repository's default) declares no backend: the runner writes
`burrito_py_backend_override.tf` (`terraform { backend "http" {} }`; an override file, so it adds the backend
without touching the layer's own files) and gives `init` the addresses as `-backend-config` arguments. The
credentials go in the environment only (`TF_HTTP_USERNAME`, `TF_HTTP_PASSWORD`: the runner's own datastore token),
which Terraform neither prints nor stores in `.terraform/`: the layer's code holds no secret and no address.

A layer whose code declares a backend (or a `cloud` block) while managed state is asked for is refused before
`init`: which state would be meant is ambiguous, and an override would silently move it. Once a migrate-state run
moved the layer's state into the datastore (`runner.burrito-py.io/state-location: managed`), the code keeps its
backend block (the way back out), and the override replaces it: an override file's backend always wins.

A migration (docs/architecture.md §5.12) reads the state on both sides (`state pull`); `state_summary` and
`migration_problem` (pure) say whether every resource instance was kept.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

__all__ = [
    "OVERRIDE",
    "OVERRIDE_FILE",
    "STATE_FIELD",
    "ManagedBackend",
    "ManagedStateError",
    "StateSummary",
    "backend_config_args",
    "declared_backends",
    "managed_backend",
    "migration_problem",
    "state_summary",
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
    # The override replaces a backend the code declares (its state was migrated here): the layer's own
    # `-backend-config` arguments are that backend's, which the http backend would refuse, so they are left out.
    replaces_code_backend: bool = False

    def extra_init_args(self, extra: Sequence[str]) -> list[str]:
        if not self.replaces_code_backend:
            return list(extra)
        return [a for a in extra if not a.startswith("-backend-config")]


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


def terraform_reachable(url: str, environ: Mapping[str, str] | None = None) -> str:
    """`url` as terraform can reach it. Under the local kubelet only (`BURRITO_LOCAL_HOSTS`, docs/architecture.md
    §13), Service names are answered for Python processes by `burrito_py.kube.pod_dns`, which terraform (Go, its own
    resolver) never asks: an http URL's host is replaced by its address from the kubelet's hosts file (not https,
    whose certificate names the host). On a real cluster (no such variable) the URL is unchanged."""
    path = (os.environ if environ is None else environ).get("BURRITO_LOCAL_HOSTS")
    parts = urlsplit(url)
    if not path or parts.scheme != "http" or not parts.hostname:
        return url
    from burrito_py.kube.pod_dns import HostsTable

    addresses = HostsTable(path).lookup(parts.hostname)
    if not addresses:
        return url
    return urlunsplit(parts._replace(netloc=addresses[0] + (f":{parts.port}" if parts.port else "")))


def backend_config_args(datastore_url: str, namespace: str, layer: str) -> list[str]:
    """`init`'s `-backend-config` arguments: where the layer's state and its lock are (no secret)."""
    address = f"{terraform_reachable(datastore_url).rstrip('/')}/api/v1/layers/{namespace}/{layer}/state"
    return [
        f"-backend-config=address={address}",
        f"-backend-config=lock_address={address}/lock",
        f"-backend-config=unlock_address={address}/lock",
        "-backend-config=lock_method=LOCK",
        "-backend-config=unlock_method=UNLOCK",
        "-backend-config=update_method=POST",
    ]


def managed_backend(layer_dir: Path, kind: str, datastore_url: str, namespace: str, layer: str,
                    token: str | None, migrated: bool = False) -> ManagedBackend:
    """Check the code declares no backend (unless a migration moved its state here: `migrated`), write the override
    file, and say how `init` and every step run."""
    declared = [] if migrated else declared_backends(layer_dir, kind)
    if declared:
        raise ManagedStateError(
            f"{STATE_FIELD} is true, but the layer's code declares its own backend ({'; '.join(declared)}): to move "
            f"the state it holds into the datastore, ask the migrate-state operation "
            f"({{\"operation\": \"migrate-state\", \"to\": \"managed\"}}); to start afresh, remove the backend; "
            f"or unset {STATE_FIELD}")
    (layer_dir / OVERRIDE_FILE).write_text(OVERRIDE, encoding="utf-8")
    env = {"TF_HTTP_USERNAME": USERNAME, "TF_HTTP_PASSWORD": token} if token else {}
    return ManagedBackend(backend_config_args(datastore_url, namespace, layer), env, replaces_code_backend=migrated)


@dataclass(frozen=True)
class StateSummary:
    """What a migration compares of a state: its lineage, serial and resource instances (by address)."""

    lineage: str
    serial: int
    instances: frozenset[str]


def _instance_address(resource: dict[str, Any], instance: dict[str, Any]) -> str:
    module = str(resource.get("module") or "")
    mode = "data." if resource.get("mode") == "data" else ""
    key = instance.get("index_key")
    index = "" if key is None else f"[{json.dumps(key)}]"
    return f"{module + '.' if module else ''}{mode}{resource.get('type')}.{resource.get('name')}{index}"


def state_summary(text: bytes) -> StateSummary:
    """The summary of `terraform state pull`'s output; an empty output is the empty state (no state yet). A state
    that is not one raises ValueError (never quoting it: it holds secrets)."""
    if not text.strip():
        return StateSummary("", 0, frozenset())
    try:
        state = json.loads(text)
    except ValueError:
        raise ValueError("the state read is not JSON") from None
    if not isinstance(state, dict) or not isinstance(state.get("resources", []), list):
        raise ValueError("the state read is not a Terraform state (no resources list)")
    instances = {
        _instance_address(resource, instance)
        for resource in state.get("resources") or () if isinstance(resource, dict)
        for instance in resource.get("instances") or () if isinstance(instance, dict)
    }
    serial = state.get("serial")
    return StateSummary(str(state.get("lineage") or ""), serial if isinstance(serial, int) else 0,
                        frozenset(instances))


def migration_problem(before: StateSummary, after: StateSummary, same_lineage: bool = True) -> str | None:
    """Why the state read from the destination after a migration is not the source's, else None: every resource
    instance kept, none added, a serial not lower and (`same_lineage`) the same lineage."""
    lost, added = sorted(before.instances - after.instances), sorted(after.instances - before.instances)
    if lost:
        return (f"{len(lost)} resource instance(s) of the source are missing from the destination "
                f"({', '.join(lost[:5])}{', …' if len(lost) > 5 else ''})")
    if added:
        return (f"the destination holds {len(added)} resource instance(s) the source does not "
                f"({', '.join(added[:5])}{', …' if len(added) > 5 else ''})")
    if same_lineage and before.lineage and before.lineage != after.lineage:
        return f"the destination's lineage {after.lineage!r} is not the source's {before.lineage!r}"
    if same_lineage and after.serial < before.serial:
        return f"the destination's serial {after.serial} is lower than the source's {before.serial}"
    return None
