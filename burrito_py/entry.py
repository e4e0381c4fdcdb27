"""The `burrito-py` console script.

`burrito-py runner start` (a runner pod's whole command) goes straight to the runner: building the typer
CLI imports every command group (~0.15 s) that a runner never uses, on every attempt of every run. Every
other invocation, `runner start --help` included, goes through the CLI.
"""

from __future__ import annotations

import sys

# Optional imports a runner never needs. httpx imports its command line (click, rich, pygments) and httpcore
# imports trio and anyio (for async clients; the runner's are synchronous) whenever they are installed; a `None`
# entry makes those imports fail fast, which both libraries handle (they fall back). Together ~0.25 s of every
# attempt's start-up, anyio ~15 ms of it.
RUNNER_SKIPPED_IMPORTS = ("httpx._main", "trio", "anyio")


def main() -> None:
    from burrito_py.kube import pod_dns as dns

    dns.install()  # cluster DNS for processes of the local kubelet; a no-op elsewhere (cheap: os and socket)
    if sys.argv[1:] == ["runner", "start"]:
        import gc

        for name in RUNNER_SKIPPED_IMPORTS:
            sys.modules.setdefault(name, None)  # type: ignore[arg-type]
        # The runner's imports make tens of thousands of objects that live until the process exits: the cycle
        # collector's passes over them while they are made free nothing (~5-10 ms CPU of every attempt). Frozen
        # once made, they are not scanned again; collection runs as usual for everything the attempt makes.
        gc.disable()
        import os

        from burrito_py.runner.early import EarlyReads

        early = EarlyReads.start(os.environ)  # the run and the layer come while the attempt's modules import
        from burrito_py.runner.main import exit_now
        from burrito_py.runner.main import main as run_attempt

        gc.freeze()
        gc.enable()
        exit_now(run_attempt(early=early))
    from burrito_py.cli import app

    app()
