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


# -- the real control plane (tests/support/controlplane.py), registered here once ---------------------------
# One session fixture for every directory that uses it (tests/e2e/ through its real cluster,
# tests/integration/controlplane/): registered in each directory's conftest, it was two fixtures, and a worker that
# ran files of both started two control planes (about 14 s each on a loaded 2-core machine, ~330 MB each while the
# session lasts). The two directories stay apart by namespace and by what each leaves cluster-wide
# (docs/architecture.md §15).
from tests.support.controlplane import controlplane  # noqa: E402,F401


@pytest.fixture
def apiserver(tmp_path: Path):  # type: ignore[no-untyped-def]
    """A fresh emulator per test; the kubeconfig at KUBECONFIG_PATH points at it."""
    from tests.support.emulator import running_apiserver

    with running_apiserver(tmp_path, kubeconfig=KUBECONFIG_PATH) as server:
        yield server


# -- the order the files reach xdist's workers ------------------------------------------------------------
# `-n 2 --dist loadfile` hands a worker the next file in the queue whenever it has two tests or fewer left. xdist's
# default queue (--loadscope-reorder) is by number of tests, most first: that put the end-to-end files (one to ten
# tests of half a minute to five minutes each) after 3,000 unit tests of milliseconds, so the suite ended on them,
# one long test on one core while the other, holding nothing, stood idle. pyproject.toml turns that reordering
# off (--no-loadscope-reorder) and the queue follows this collection order: the slow directories first, so the
# many short files come last and keep both cores busy to the end. The order of the tests within a file is kept.
SLOW_FIRST = ("tests/e2e/", "tests/integration/controlplane/", "tests/integration/controllers/", "tests/integration/")


def _queue_rank(item: pytest.Item) -> int:
    path = item.nodeid.split("::", 1)[0]
    return next((rank for rank, prefix in enumerate(SLOW_FIRST) if path.startswith(prefix)), len(SLOW_FIRST))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=_queue_rank)  # stable: collection order within a rank
