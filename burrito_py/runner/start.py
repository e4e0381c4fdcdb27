"""How a runner process starts: `burrito-py runner start` (`entry.py`, a runner pod's whole command) and
`python -m burrito_py.runner` alike (docs/architecture.md §14 "Runner start-up costs").

Three things before the attempt's modules import, each measured on every attempt of every run: the optional
imports a runner never needs fail fast; the cycle collector stays off while the imports make objects that live
until the process exits, which are then frozen; and the run and the layer are read meanwhile (`early`).
"""

from __future__ import annotations

import gc
import os
import sys
from typing import NoReturn

from burrito_py.runner.early import EarlyReads

__all__ = ["RUNNER_SKIPPED_IMPORTS", "start"]

# Optional imports a runner never needs. httpx imports its command line (click, rich, pygments) and httpcore
# imports trio and anyio (for async clients; the runner's are synchronous) whenever they are installed; a `None`
# entry makes those imports fail fast, which both libraries handle (they fall back). Together ~0.25 s of every
# attempt's start-up, anyio ~15 ms of it.
RUNNER_SKIPPED_IMPORTS = ("httpx._main", "trio", "anyio")


def start() -> NoReturn:
    """Run one attempt in this process and end it with the attempt's exit code."""
    for name in RUNNER_SKIPPED_IMPORTS:
        sys.modules.setdefault(name, None)  # type: ignore[arg-type]
    # The runner's imports make tens of thousands of objects that live until the process exits: the cycle
    # collector's passes over them while they are made free nothing (~5-10 ms CPU of every attempt). Frozen
    # once made, they are not scanned again; collection runs as usual for everything the attempt makes.
    gc.disable()
    early = EarlyReads.start(os.environ)  # the run and the layer come while the attempt's modules import
    from burrito_py.runner.main import exit_now
    from burrito_py.runner.main import main as run_attempt

    gc.freeze()
    gc.enable()
    exit_now(run_attempt(early=early))
