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
from hypothesis import settings  # noqa: E402

# Hypothesis fails an example that takes over 200 ms by default. The properties here are about decisions, not their
# speed, and on two cores shared with control planes and runner pods one example in thousands is slow for reasons of
# the machine: that deadline only made flakes (a 308 ms example of a pure decision). The benches measure speed.
settings.register_profile("burrito-py", deadline=None)
settings.load_profile("burrito-py")


@pytest.fixture
def apiserver(tmp_path: Path):  # type: ignore[no-untyped-def]
    """A fresh emulator per test; the kubeconfig at KUBECONFIG_PATH points at it."""
    from tests.support.emulator import running_apiserver

    with running_apiserver(tmp_path, kubeconfig=KUBECONFIG_PATH) as server:
        yield server
