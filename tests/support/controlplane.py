"""The real control plane for tests (local/burrito_local/controlplane.py, docs/architecture.md §22): one per
test session (per xdist worker that needs it), isolated by namespaces.

`controlplane` is registered once, in tests/conftest.py, so every directory of a session (tests/e2e/,
tests/integration/controlplane/) shares one per worker; `node` (the control plane with the local kubelet as its
Node, in a network namespace) in the conftest of the directory that uses it.
The binary is built first when it is not cached (progress on stderr); without Go that is a failure naming
the cause, never a skip.
"""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from burrito_local.controlplane import ControlPlane, ControlPlaneConfig, ControlPlaneError, binary_path
from burrito_local.netns import NodeNamespace

T = TypeVar("T")


def built_binary() -> Path:
    """The control plane's binary, built when missing; a failure (no Go, a build error) is an error of the
    tests that need it, naming the script, never a skip."""
    try:
        return binary_path(build=True)
    except ControlPlaneError as exc:
        raise ControlPlaneError(f"the real control plane is needed and scripts/build-controlplane.sh could not build "
                                f"it: {exc}") from None


@pytest.fixture(scope="session")
def controlplane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    binary = built_binary()
    config = ControlPlaneConfig(tmp_path_factory.mktemp("controlplane"), unsafe_no_fsync=True)
    with ControlPlane(binary, config) as plane:
        yield plane


@pytest.fixture(scope="session")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeNamespace]:
    """The control plane with the local kubelet as its Node, in a private network namespace (§22.3): one
    per session and xdist worker that needs it, tests apart by namespace."""
    with NodeNamespace(tmp_path_factory.mktemp("netns"), built_binary()) as cluster:
        yield cluster


def kubectl(plane: ControlPlane | NodeNamespace, *args: str, check: bool = True, stdin: str | None = None,
            timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """kubectl as the cluster admin of `plane`; `check`: fail the test, with kubectl's stderr, on an error."""
    result = subprocess.run(["kubectl", f"--kubeconfig={plane.kubeconfig}", *args], input=stdin,
                            capture_output=True, text=True, timeout=timeout, check=False)
    if check and result.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} failed ({result.returncode}): {result.stderr.strip()}")
    return result


def kubectl_json(plane: ControlPlane | NodeNamespace, *args: str) -> Any:
    return json.loads(kubectl(plane, *args, "-o", "json").stdout)


def apply(plane: ControlPlane | NodeNamespace, *objects: dict[str, Any]) -> None:
    kubectl(plane, "apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objects)}))


def wait_established(plane: ControlPlane | NodeNamespace, *names: str, timeout: float = 60) -> None:
    """Every CRD named (all CRDs without names) is Established. Not `kubectl wait --for=condition=Established`:
    on a CRD created a moment before, whose status has no conditions yet, it fails at once (".status.conditions
    accessor error: <nil>")."""

    def established() -> bool:
        listed = kubectl_json(plane, "get", "crd", *names)
        items = listed.get("items", [listed]) if listed.get("kind") == "List" else [listed]
        return bool(items) and all(
            any(c.get("type") == "Established" and c.get("status") == "True"
                for c in (item.get("status") or {}).get("conditions") or ())
            for item in items)

    eventually(established, timeout, what=f"the CRDs {', '.join(names) or '(all)'} to be Established")


def unique_namespace(plane: ControlPlane | NodeNamespace, prefix: str = "t") -> str:
    """A fresh namespace: tests share the session's control plane and stay apart by namespace."""
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    kubectl(plane, "create", "namespace", name)
    return name


def eventually(predicate: Callable[[], T], timeout: float = 60.0, interval: float = 0.25, what: str = "") -> T:
    """Poll until `predicate()` is truthy and return it (a real control plane's controllers act within
    seconds; the timeout is for a loaded 2-core machine)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what or predicate!r}")
        time.sleep(interval)


def read_crds(root: Path) -> list[Path]:
    return sorted((root / "crds").glob("*.yaml"))
