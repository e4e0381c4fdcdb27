"""Process-wide test set-up.

`kubernetes` reads $KUBECONFIG when it is imported, so point it at a fixed per-session path
before anything imports it; fixtures rewrite that file for each emulator they start.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

_KUBECONFIG_DIR = Path(tempfile.mkdtemp(prefix="burrito-py-tests-"))
KUBECONFIG_PATH = _KUBECONFIG_DIR / "kubeconfig"
os.environ["KUBECONFIG"] = str(KUBECONFIG_PATH)


# -- the Kubernetes API emulator (local/burrito_local/apiserver.py) ------------------------------------
import pytest  # noqa: E402


@pytest.fixture
def apiserver(tmp_path: Path):  # type: ignore[no-untyped-def]
    """A fresh emulator per test; the kubeconfig at KUBECONFIG_PATH points at it."""
    from tests.support.emulator import running_apiserver

    with running_apiserver(tmp_path, kubeconfig=KUBECONFIG_PATH) as server:
        yield server
