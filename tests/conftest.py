"""Process-wide test set-up.

`kubernetes` reads $KUBECONFIG when it is imported, so point it at a fixed per-session path
before anything imports it; fixtures rewrite that file for each emulator they start.
"""

from __future__ import annotations

import os
import signal
import tempfile
from pathlib import Path

# A suite started in the background of a non-interactive shell (`pytest … &`, `nohup`) inherits SIGINT ignored, and
# an ignored signal stays ignored across exec: every process a test starts (`burrito-py dev`, the runner's
# terraform, the emulator) would then ignore the SIGINT the test sends to stop it, and the test would time out.
# Python's own handler here means the children start with the default disposition, as from a terminal.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

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
