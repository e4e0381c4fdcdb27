"""Absolute paths inside a pod, wherever the pod runs: on a node they are what they say; under the
local kubelet they live below the pod's private root (`BURRITO_LOCAL_ROOT`)."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


def pod_path(path: str | Path) -> Path:
    root = os.environ.get("BURRITO_LOCAL_ROOT")
    return Path(root) / str(path).lstrip("/") if root else Path(path)


def pod_path_setting(path: Path | None) -> Path | None:
    """For settings validators: an absolute path is a path inside the pod (mapped under the local pod root);
    a relative one, or a path already under that root, is left as it is."""
    root = os.environ.get("BURRITO_LOCAL_ROOT")
    if path is None or not root or not path.is_absolute() or path.is_relative_to(root):
        return path
    return pod_path(path)


SERVICE_ACCOUNT_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


def own_namespace() -> str:
    """The pod's namespace (the service account mount), else POD_NAMESPACE, else `default`."""
    with contextlib.suppress(OSError):
        return pod_path(SERVICE_ACCOUNT_NAMESPACE).read_text().strip() or "default"
    return os.environ.get("POD_NAMESPACE") or "default"
