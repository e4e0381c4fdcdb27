"""Absolute paths inside a pod, wherever the pod runs: on a node they are what they say; under the
local kubelet they live below the pod's private root (`BURRITO_LOCAL_ROOT`)."""

from __future__ import annotations

import os
from pathlib import Path


def pod_path(path: str) -> Path:
    root = os.environ.get("BURRITO_LOCAL_ROOT")
    return Path(root) / path.lstrip("/") if root else Path(path)
